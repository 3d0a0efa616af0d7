import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { notFound } from '../../core/problems.ts';
import type { CustomConnectorTable } from './tables.ts';
import type { CustomConnector, CustomConnectorInput, Endpoint } from './schemas.ts';
import { toEndpoint } from './profiles.ts';

type StoredDocument = Pick<CustomConnector, 'icon' | 'logo' | 'endpoints'>;

function toCustomConnector(row: Selectable<CustomConnectorTable>): CustomConnector {
  const document: StoredDocument = JSON.parse(row.document);
  return {
    id: row.id,
    name: row.name,
    ...document,
    deleted: row.deleted === 1,
    deletedTime: row.deletedTime,
    lastModified: row.lastModified,
  };
}

function documentOf(input: CustomConnectorInput): string {
  const document: StoredDocument = { icon: input.icon, logo: input.logo, endpoints: input.endpoints.map(toEndpoint) };
  return JSON.stringify(document);
}

export async function createCustomConnector(
  db: Executor,
  accountId: string,
  input: CustomConnectorInput,
): Promise<CustomConnector> {
  const id = randomUUID();
  const time = now();
  await db
    .insertInto('customConnectors')
    .values({
      id,
      accountId,
      name: input.name,
      document: documentOf(input),
      deleted: 0,
      deletedTime: null,
      lastModified: time,
      createdAt: time,
    })
    .execute();
  return requireCustomConnector(db, accountId, id);
}

/** The account's profiles by name; deleted ones only when asked for. */
export async function listCustomConnectors(db: Executor, accountId: string, includeDeleted: boolean): Promise<CustomConnector[]> {
  let query = db.selectFrom('customConnectors').selectAll().where('accountId', '=', accountId);
  if (!includeDeleted) query = query.where('deleted', '=', 0);
  const rows = await query.orderBy('name').orderBy('id').execute();
  return rows.map(toCustomConnector);
}

/** Profile `id` of the account, deleted or not, or a 404 (another account's answers as if it did not exist). */
export async function requireCustomConnector(db: Executor, accountId: string, id: string): Promise<CustomConnector> {
  const row = await db
    .selectFrom('customConnectors')
    .selectAll()
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (!row) throw notFound(`Custom connector ${id} does not exist.`);
  return toCustomConnector(row);
}

/** Endpoint `endpointId` of a profile that is not deleted, or a 404. */
export async function requireLiveEndpoint(db: Executor, accountId: string, id: string, endpointId: string): Promise<Endpoint> {
  const connector = await requireCustomConnector(db, accountId, id);
  if (connector.deleted) throw notFound(`Custom connector ${id} is deleted.`);
  const endpoint = connector.endpoints.find((e) => e.id === endpointId);
  if (!endpoint) throw notFound(`Custom connector ${id} has no endpoint ${endpointId}.`);
  return endpoint;
}

/** Replaces the whole profile; a deleted profile cannot be changed (404). */
export async function replaceCustomConnector(
  db: Executor,
  accountId: string,
  id: string,
  input: CustomConnectorInput,
): Promise<CustomConnector> {
  const result = await db
    .updateTable('customConnectors')
    .set({ name: input.name, document: documentOf(input), lastModified: now() })
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .where('deleted', '=', 0)
    .executeTakeFirst();
  if (result.numUpdatedRows === 0n) throw notFound(`Custom connector ${id} does not exist or is deleted.`);
  return requireCustomConnector(db, accountId, id);
}

/** Marks the profile deleted; it stays readable, and listed when deleted ones are asked for. */
export async function deleteCustomConnector(db: Executor, accountId: string, id: string): Promise<void> {
  const time = now();
  const result = await db
    .updateTable('customConnectors')
    .set({ deleted: 1, deletedTime: time, lastModified: time })
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .where('deleted', '=', 0)
    .executeTakeFirst();
  if (result.numUpdatedRows === 0n) throw notFound(`Custom connector ${id} does not exist or is deleted.`);
}
