import { randomUUID } from 'node:crypto';
import type { Db, Executor, Trx } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import { countOf, offsetOf, pageOf, type PageQuery } from '../../core/paging.ts';
import type { ProjectTable } from './tables.ts';
import type { CreateProjectRequest, Project } from './schemas.ts';

function toProject(row: Pick<ProjectTable, 'id' | 'name' | 'description' | 'createdAt'>): Project {
  return {
    id: row.id,
    name: row.name,
    ...(row.description !== null && { description: row.description }),
    createdAt: row.createdAt,
  };
}

/**
 * The project `projectId` of the caller's account, or a 404: a project of another account is
 * answered exactly as one that does not exist. Every area checks its project through this.
 */
export async function requireProject(db: Executor, accountId: string, projectId: string): Promise<Project> {
  const row = await db
    .selectFrom('projects')
    .select(['id', 'name', 'description', 'createdAt'])
    .where('id', '=', projectId)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (!row) throw notFound(`Project ${projectId} does not exist.`);
  return toProject(row);
}

/** Runs `write` in one transaction, once the project is found to be of the caller's account. */
export function writeInProject<T>(db: Db, accountId: string, projectId: string, write: (trx: Trx) => Promise<T>): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await requireProject(trx, accountId, projectId);
    return write(trx);
  });
}

/** A page of what `list` finds in a project, once the project is found to be of the caller's account. */
export async function pageInProject<Q extends PageQuery, T>(
  db: Db,
  accountId: string,
  projectId: string,
  query: Q,
  list: (db: Db, projectId: string, query: Q) => Promise<{ results: T[]; total: number }>,
) {
  await requireProject(db, accountId, projectId);
  const { results, total } = await list(db, projectId, query);
  return pageOf(query, results, total);
}

export async function createProject(
  db: Executor,
  accountId: string,
  createdBy: string,
  request: CreateProjectRequest,
): Promise<string> {
  const id = randomUUID();
  try {
    await db
      .insertInto('projects')
      .values({ id, accountId, name: request.name, description: request.description ?? null, createdBy, createdAt: now() })
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`A project named "${request.name}" already exists in this account.`);
    throw error;
  }
  return id;
}

export async function listProjects(db: Executor, accountId: string, query: PageQuery) {
  const inAccount = db.selectFrom('projects').where('accountId', '=', accountId);
  const [rows, total] = await Promise.all([
    inAccount
      .select(['id', 'name', 'description', 'createdAt'])
      .orderBy('name')
      .limit(query.size)
      .offset(offsetOf(query))
      .execute(),
    countOf(inAccount),
  ]);
  return { results: rows.map(toProject), total };
}

/** Removes the project; everything attached to it goes with it (foreign keys cascade). */
export async function deleteProject(db: Executor, accountId: string, projectId: string): Promise<void> {
  const result = await db
    .deleteFrom('projects')
    .where('id', '=', projectId)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (result.numDeletedRows === 0n) throw notFound(`Project ${projectId} does not exist.`);
}
