/**
 * The environments' rules: names unique in the project, a default agent of the caller's account, 404s for
 * an environment the project does not have, and how an environment is shown. The SQL is the repository's
 * (repository.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import { requireAgent } from '../agents/index.ts';
import { projectList } from '../projects/index.ts';
import {
  agentNameOf,
  deleteEnvironmentRow,
  environmentListQueries,
  findEnvironment,
  findEnvironmentId,
  insertEnvironment,
  type EnvironmentRow,
} from './repository.ts';
import type { CreateEnvironmentRequest, Environment, WarehouseSettings } from './schemas.ts';

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

/**
 * Creates an environment of the project (of the caller's account: the caller checks). The default agent must
 * be one of the caller's account (404 otherwise, as for any agent it cannot see); a name taken is a 409.
 */
export async function createEnvironment(
  db: Executor,
  accountId: string,
  projectId: string,
  request: CreateEnvironmentRequest,
): Promise<Environment> {
  if (request.defaultAgentId !== undefined) await requireAgent(db, accountId, request.defaultAgentId);
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
    await insertEnvironment(db, row);
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`An environment named "${request.name}" already exists in this project.`);
    throw error;
  }
  return toEnvironment({ ...row, defaultAgentName: await agentNameOf(db, projectId, row.defaultAgentId) });
}

/** A page of the project's environments in name order, if the project is the caller's. */
export const listEnvironments = projectList({ ...environmentListQueries, toItem: toEnvironment });

/** The id of environment `name` of the project, or a 404. */
export async function requireEnvironmentId(db: Executor, projectId: string, name: string): Promise<string> {
  const row = await findEnvironmentId(db, projectId, name);
  if (!row) throw notFound(`Environment "${name}" does not exist in this project.`);
  return row.id;
}

/** Removes environment `name`; what is set per environment goes with it (foreign keys cascade). A 404 when there is none. */
export async function deleteEnvironment(db: Executor, projectId: string, name: string): Promise<void> {
  if (!(await deleteEnvironmentRow(db, projectId, name))) throw notFound(`Environment "${name}" does not exist in this project.`);
}

/** Environment `name` of the project with its default agent, or a 404. */
export async function requireEnvironment(db: Executor, projectId: string, name: string) {
  const row = await findEnvironment(db, projectId, name);
  if (!row) throw notFound(`Environment "${name}" does not exist in this project.`);
  return { ...row, warehouse: row.warehouse === null ? null : (JSON.parse(row.warehouse) as WarehouseSettings) };
}
