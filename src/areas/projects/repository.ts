/**
 * The projects' SQL: rows of `projects` and nothing else, in compiled-once statements where a read is hot.
 * The rules (a project of another account is none, names unique in the account, paging, remembering) are
 * the service's (service.ts).
 */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import { sql, type Compilable, type ExpressionBuilder, type ExpressionWrapper, type SelectQueryBuilder } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import type { Database } from '../../core/db/schema.ts';
import { preparedQuery } from '../../core/db/prepared.ts';
import type { PageWindow } from '../../core/paging.ts';
import type { ProjectTable } from './tables.ts';

/** The columns of a project that the API shows. */
export type ProjectRow = Pick<ProjectTable, 'id' | 'name' | 'description' | 'createdAt'>;

/** Project `projectId` of account `accountId`, as zero or one row. */
export const projectOfAccount = preparedQuery((db, params: { projectId: string; accountId: string }) =>
  db
    .selectFrom('projects')
    .select(['id', 'name', 'description', 'createdAt'])
    .where('id', '=', params.projectId)
    .where('accountId', '=', params.accountId),
);

export interface ProjectListQueries<Row extends { name: string }> {
  /** How many items the project has: a scalar subquery on its id (a count, or a counter kept on write). */
  total(eb: ExpressionBuilder<Database, 'projects'>, projectId: string): ExpressionWrapper<Database, 'projects', unknown>;
  /** The rows of a window of the project's items, in name order (reversed when `descending`). */
  page(
    db: Executor,
    params: { projectId: string } & Omit<PageWindow, 'descending'>,
    descending: boolean,
  ): SelectQueryBuilder<Database, any, Row>;
}

/**
 * The compiled-once statements of a paged list of a project's items: the project in the account with its
 * total and a forward page in one statement (no row when the project is not the account's; one row of null
 * item columns when the page is empty), the project with its total alone, and a page forwards or backwards.
 */
export function projectListStatements<Row extends { name: string }>(queries: ProjectListQueries<Row>) {
  const projectTotal = (db: Executor, params: { projectId: string; accountId: string }) =>
    db
      .selectFrom('projects')
      .select((eb) => queries.total(eb, params.projectId).as('total'))
      .where('id', '=', params.projectId)
      .where('accountId', '=', params.accountId);
  return {
    projectWithFirstPage: preparedQuery(
      (db, params: { projectId: string; accountId: string; limit: number; offset: number }) =>
        db
          .selectFrom(projectTotal(db, params).as('project'))
          .leftJoin(queries.page(db, params, false).as('page'), (join) => join.onTrue())
          .select('project.total')
          .selectAll('page')
          // Rows of a join come in no promised order: the page's own order, stated again.
          .orderBy(sql.ref('page.name')) as unknown as Compilable<Row & { total: unknown }>,
    ),
    projectWithTotal: preparedQuery(projectTotal),
    pages: [false, true].map((descending) =>
      preparedQuery((db, params: { projectId: string; limit: number; offset: number }) => queries.page(db, params, descending)),
    ),
  };
}

/** Inserts a project. A name taken in the account is a unique violation. */
export async function insertProject(db: Executor, row: ProjectTable): Promise<void> {
  await db.insertInto('projects').values(row).execute();
}

/** How many projects the account has, as one row. */
export const accountTotal = preparedQuery((db, params: { accountId: string }) =>
  db
    .selectFrom('projects')
    .select((eb) => eb.fn.countAll().as('total'))
    .where('accountId', '=', params.accountId),
);

/** A window of the account's projects in name order, forwards ([0]) or backwards ([1]). */
export const accountPages = [false, true].map((descending) =>
  preparedQuery((db, params: { accountId: string; limit: number; offset: number }) =>
    db
      .selectFrom('projects')
      .select(['id', 'name', 'description', 'createdAt'])
      .where('accountId', '=', params.accountId)
      .orderBy('name', descending ? 'desc' : 'asc')
      .limit(params.limit)
      .offset(params.offset),
  ),
);

/**
 * Deletes the account's project (foreign keys cascade); whether there was one. Where the request's If-Match
 * check saw a version of the row, only that version is deleted (a 412 otherwise: core/conditional.ts).
 */
export async function deleteProjectRow(db: Executor, accountId: string, projectId: string): Promise<boolean> {
  const expected = expectedRowVersion('projects', projectId);
  let deletion = db.deleteFrom('projects').where('id', '=', projectId).where('accountId', '=', accountId);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('projects', projectId, result.numDeletedRows > 0n);
  return result.numDeletedRows > 0n;
}

/** The accounts of projects by project id (ids that name no project are absent). */
export async function accountsOfProjects(db: Executor, projectIds: readonly string[]): Promise<Map<string, string>> {
  if (projectIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('projects')
    .select(['id', 'accountId'])
    .where('id', 'in', [...new Set(projectIds)])
    .execute();
  return new Map(rows.map((row) => [row.id, row.accountId]));
}

/** The names of the account's projects by id, for the ids that are projects of the account. */
export async function projectNamesById(
  db: Executor,
  accountId: string,
  projectIds: readonly string[],
): Promise<Map<string, string>> {
  if (projectIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('projects')
    .select(['id', 'name'])
    .where('accountId', '=', accountId)
    .where('id', 'in', [...new Set(projectIds)])
    .execute();
  return new Map(rows.map((row) => [row.id, row.name]));
}

/** For queries of other areas: a scalar subquery, the account of project `projectId`. */
export function accountOfProject(eb: ExpressionBuilder<Database, any>, projectId: string) {
  return eb.selectFrom('projects').select('projects.accountId').where('projects.id', '=', projectId).$asScalar();
}
