/** The connections' SQL: rows of `connections` and `connectionOverrides` and nothing else. The rules are the service's (service.ts). */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import type { ConnectionOverrideTable, ConnectionTable } from './tables.ts';

export type ConnectionRow = Selectable<ConnectionTable>;

/** What a replacement writes of a connection. */
export type ConnectionFields = Pick<
  ConnectionTable,
  'authProvider' | 'authType' | 'platformConnectionType' | 'connectionDetails'
>;

/** An override as read: the name of its connection, its environment's id and its details (JSON text). */
export interface OverrideRow {
  connectionName: string;
  environmentId: string;
  connectionDetails: string;
}

/** Inserts a connection. A name taken in the project is a unique violation. */
export async function insertConnection(db: Executor, row: ConnectionRow): Promise<void> {
  await db.insertInto('connections').values(row).execute();
}

/** A page of the project's connections, by name, filtered by provider and names when given, and how many match. */
export async function listConnectionRows(
  db: Executor,
  projectId: string,
  filter: { authProvider?: string; names?: string[] },
  query: PageQuery,
): Promise<{ rows: ConnectionRow[]; total: number }> {
  let filtered = db.selectFrom('connections').where('projectId', '=', projectId);
  if (filter.authProvider !== undefined) filtered = filtered.where('authProvider', '=', filter.authProvider);
  if (filter.names !== undefined) filtered = filtered.where('name', 'in', filter.names);
  const [rows, total] = await Promise.all([
    filtered.selectAll().orderBy('name').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(filtered),
  ]);
  return { rows, total };
}

/** The project's connection of that name. */
export function findConnection(db: Executor, projectId: string, name: string): Promise<ConnectionRow | undefined> {
  return db.selectFrom('connections').selectAll().where('projectId', '=', projectId).where('name', '=', name).executeTakeFirst();
}

/**
 * Writes a connection's replaced fields, one version on. Where the request's If-Match check saw a version of
 * this row, only that version is changed (a 412 when another write came between: core/conditional.ts).
 */
export async function updateConnectionRow(db: Executor, id: string, fields: ConnectionFields): Promise<void> {
  const expected = expectedRowVersion('connections', id);
  let update = db
    .updateTable('connections')
    .set({ ...fields, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', id);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('connections', id, result.numUpdatedRows > 0n);
}

/** Deletes the project's connection of that name (its overrides cascade); whether there was one. As above for If-Match. */
export async function deleteConnectionRow(db: Executor, projectId: string, name: string): Promise<boolean> {
  const row = await db
    .selectFrom('connections')
    .select('id')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (!row) return false;
  const expected = expectedRowVersion('connections', row.id);
  let deletion = db.deleteFrom('connections').where('id', '=', row.id);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('connections', row.id, result.numDeletedRows > 0n);
  return result.numDeletedRows > 0n;
}

/** How If-Match names an override (a row of two keys): its connection's id and its environment's. */
export const overrideIdentity = (connectionId: string, environmentId: string) => `${connectionId}/${environmentId}`;

/** The version of a connection's override in an environment, if it has one. */
export async function overrideRowVersion(db: Executor, connectionId: string, environmentId: string): Promise<number | undefined> {
  const row = await db
    .selectFrom('connectionOverrides')
    .select('rowVersion')
    .where('connectionId', '=', connectionId)
    .where('environmentId', '=', environmentId)
    .executeTakeFirst();
  return row === undefined ? undefined : Number(row.rowVersion ?? 0);
}

function selectOverrides(db: Executor) {
  return db.selectFrom('connectionOverrides').innerJoin('connections', 'connections.id', 'connectionOverrides.connectionId');
}

const OVERRIDE_COLUMNS = [
  'connections.name as connectionName',
  'connectionOverrides.environmentId',
  'connectionOverrides.connectionDetails',
] as const;

/** The overrides of one connection, unordered. */
export function overrideRowsOf(db: Executor, connectionId: string): Promise<OverrideRow[]> {
  return selectOverrides(db).select(OVERRIDE_COLUMNS).where('connections.id', '=', connectionId).execute();
}

/** All the project's overrides, of one environment and of some connections when given, unordered. */
export function overrideRowsInProject(
  db: Executor,
  projectId: string,
  filter: { environmentId?: string; connectionNames?: string[] },
): Promise<OverrideRow[]> {
  let filtered = selectOverrides(db).where('connections.projectId', '=', projectId);
  if (filter.environmentId !== undefined)
    filtered = filtered.where('connectionOverrides.environmentId', '=', filter.environmentId);
  if (filter.connectionNames !== undefined) filtered = filtered.where('connections.name', 'in', filter.connectionNames);
  return filtered.select([...OVERRIDE_COLUMNS]).execute();
}

/** Inserts an override. A connection's second override in one environment is a unique violation. */
export async function insertOverride(db: Executor, row: ConnectionOverrideTable): Promise<void> {
  await db.insertInto('connectionOverrides').values(row).execute();
}

/** Writes the details of a connection's override in an environment; whether there was one. */
export async function updateOverrideDetails(
  db: Executor,
  connectionId: string,
  environmentId: string,
  connectionDetails: string,
): Promise<boolean> {
  const id = overrideIdentity(connectionId, environmentId);
  const expected = expectedRowVersion('connectionOverrides', id);
  let update = db
    .updateTable('connectionOverrides')
    .set({ connectionDetails, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('connectionId', '=', connectionId)
    .where('environmentId', '=', environmentId);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('connectionOverrides', id, result.numUpdatedRows > 0n);
  return result.numUpdatedRows > 0n;
}

/** Deletes a connection's override in an environment; whether there was one. */
export async function deleteOverrideRow(db: Executor, connectionId: string, environmentId: string): Promise<boolean> {
  const id = overrideIdentity(connectionId, environmentId);
  const expected = expectedRowVersion('connectionOverrides', id);
  let deletion = db
    .deleteFrom('connectionOverrides')
    .where('connectionId', '=', connectionId)
    .where('environmentId', '=', environmentId);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('connectionOverrides', id, result.numDeletedRows > 0n);
  return result.numDeletedRows > 0n;
}

/** The details (JSON text) of a connection's override in an environment, if it has one. */
export async function overrideDetails(db: Executor, connectionId: string, environmentId: string): Promise<string | undefined> {
  const row = await db
    .selectFrom('connectionOverrides')
    .select('connectionDetails')
    .where('connectionId', '=', connectionId)
    .where('environmentId', '=', environmentId)
    .executeTakeFirst();
  return row?.connectionDetails;
}
