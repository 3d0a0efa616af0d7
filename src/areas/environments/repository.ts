/**
 * The environments' SQL: rows of `environments` and nothing else (the default agent's name through the agents
 * area's face). The rules (unique names, 404s, how an environment is shown) are the service's (service.ts).
 */
import type { Executor } from '../../core/db/database.ts';
import { agentNameWhere } from '../agents/index.ts';
import { accountOfProject, type ProjectListQueries } from '../projects/index.ts';
import type { EnvironmentTable } from './tables.ts';

/** An environment's columns that the API shows, with the name of its default agent. */
export type EnvironmentRow = Pick<EnvironmentTable, 'name' | 'description' | 'defaultAgentId' | 'warehouse' | 'createdAt'> & {
  defaultAgentName: string | null;
};

/** The name of agent `agentId` when it is one of the account's that owns the project (else null). */
export async function agentNameOf(db: Executor, projectId: string, agentId: string | null): Promise<string | null> {
  if (agentId === null) return null;
  const row = await db
    .selectNoFrom((eb) => agentNameWhere(eb, eb.val(agentId), accountOfProject(eb, projectId)).as('name'))
    .executeTakeFirst();
  return row?.name ?? null;
}

/** Inserts an environment. A name taken in the project is a unique violation. */
export async function insertEnvironment(db: Executor, row: EnvironmentTable): Promise<void> {
  await db.insertInto('environments').values(row).execute();
}

/** The queries of a paged list of the project's environments in name order (with the default agent's name). */
export const environmentListQueries: ProjectListQueries<EnvironmentRow> = {
  total: (eb, projectId) =>
    eb.selectFrom('environments').select(eb.fn.countAll().as('count')).where('projectId', '=', projectId).$asScalar(),
  page: (db, { projectId, limit, offset }, descending) =>
    db
      .selectFrom('environments')
      .select((eb) => [
        'environments.name',
        'environments.description',
        'environments.defaultAgentId',
        'environments.warehouse',
        'environments.createdAt',
        // The default agent's name, where it is one of the project's account.
        agentNameWhere(eb, eb.ref('environments.defaultAgentId'), accountOfProject(eb, projectId)).as('defaultAgentName'),
      ])
      .where('environments.projectId', '=', projectId)
      .orderBy('environments.name', descending ? 'desc' : 'asc')
      .limit(limit)
      .offset(offset),
};

/** The id of environment `name` of the project, if there is one. */
export function findEnvironmentId(db: Executor, projectId: string, name: string) {
  return db
    .selectFrom('environments')
    .select('id')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
}

/** Deletes environment `name` of the project (foreign keys cascade); whether there was one. */
export async function deleteEnvironmentRow(db: Executor, projectId: string, name: string): Promise<boolean> {
  const result = await db
    .deleteFrom('environments')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** Environment `name` of the project with its default agent and warehouse (as stored), if there is one. */
export function findEnvironment(db: Executor, projectId: string, name: string) {
  return db
    .selectFrom('environments')
    .select(['id', 'name', 'defaultAgentId', 'warehouse'])
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
}

/** The names of environments by id (ids that name no environment are absent). */
export async function environmentNamesById(db: Executor, ids: readonly string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await db
    .selectFrom('environments')
    .select(['id', 'name'])
    .where('id', 'in', [...new Set(ids)])
    .execute();
  return new Map(rows.map((row) => [row.id, row.name]));
}

/** The ids of the project's environments by name, for the names that exist. */
export async function environmentIdsByName(
  db: Executor,
  projectId: string,
  names: readonly string[],
): Promise<Map<string, string>> {
  if (names.length === 0) return new Map();
  const rows = await db
    .selectFrom('environments')
    .select(['id', 'name'])
    .where('projectId', '=', projectId)
    .where('name', 'in', [...new Set(names)])
    .execute();
  return new Map(rows.map((row) => [row.name, row.id]));
}
