import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import { agentNameWhere } from '../agents/index.ts';
import { accountOfProject, projectList } from '../projects/index.ts';
import type { EnvironmentTable } from './tables.ts';
import type { CreateEnvironmentRequest, Environment, WarehouseSettings } from './schemas.ts';

type EnvironmentRow = Pick<EnvironmentTable, 'name' | 'description' | 'defaultAgentId' | 'warehouse' | 'createdAt'> & {
  defaultAgentName: string | null;
};

function toEnvironment(row: EnvironmentRow): Environment {
  return {
    name: row.name,
    ...(row.description !== null && { description: row.description }),
    ...(row.defaultAgentId !== null && { defaultAgentId: row.defaultAgentId }),
    ...(row.defaultAgentName !== null && { defaultAgentName: row.defaultAgentName }),
    ...(row.warehouse !== null && { warehouse: JSON.parse(row.warehouse) as WarehouseSettings }),
    createdAt: row.createdAt,
  };
}

/** The name of agent `agentId` when it is one of the account's that owns the project (else null). */
async function agentNameOf(db: Executor, projectId: string, agentId: string | null): Promise<string | null> {
  if (agentId === null) return null;
  const row = await db
    .selectNoFrom((eb) => agentNameWhere(eb, eb.val(agentId), accountOfProject(eb, projectId)).as('name'))
    .executeTakeFirst();
  return row?.name ?? null;
}

export async function createEnvironment(
  db: Executor,
  projectId: string,
  request: CreateEnvironmentRequest,
): Promise<Environment> {
  const row = {
    id: randomUUID(),
    projectId,
    name: request.name,
    description: request.description ?? null,
    defaultAgentId: request.defaultAgentId ?? null,
    warehouse: request.warehouse === undefined ? null : JSON.stringify(request.warehouse),
    createdAt: now(),
  };
  try {
    await db.insertInto('environments').values(row).execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`An environment named "${request.name}" already exists in this project.`);
    throw error;
  }
  return toEnvironment({ ...row, defaultAgentName: await agentNameOf(db, projectId, row.defaultAgentId) });
}

/** A page of the project's environments in name order, if the project is the caller's. */
export const listEnvironments = projectList({
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
  toItem: toEnvironment,
});

/** The id of environment `name` of the project, or a 404. */
export async function requireEnvironmentId(db: Executor, projectId: string, name: string): Promise<string> {
  const row = await db
    .selectFrom('environments')
    .select('id')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (!row) throw notFound(`Environment "${name}" does not exist in this project.`);
  return row.id;
}

/** Removes environment `name`; what is set per environment goes with it (foreign keys cascade). */
export async function deleteEnvironment(db: Executor, projectId: string, name: string): Promise<void> {
  const result = await db
    .deleteFrom('environments')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (result.numDeletedRows === 0n) throw notFound(`Environment "${name}" does not exist in this project.`);
}

/** Environment `name` of the project with its default agent, or a 404. */
export async function requireEnvironment(db: Executor, projectId: string, name: string) {
  const row = await db
    .selectFrom('environments')
    .select(['id', 'name', 'defaultAgentId', 'warehouse'])
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (!row) throw notFound(`Environment "${name}" does not exist in this project.`);
  return { ...row, warehouse: row.warehouse === null ? null : (JSON.parse(row.warehouse) as WarehouseSettings) };
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
