/**
 * The connector profiles' rules: a profile checked whole before it is written (profiles.ts), its document as
 * stored, soft deletion (a deleted profile stays readable but cannot change or be tested), and another account's
 * profile answering as if it did not exist. The SQL is the repository's.
 */
import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { notFound } from '../../core/problems.ts';
import type { CustomConnector, CustomConnectorInput, Endpoint } from './schemas.ts';
import { assertValidProfile, toEndpoint } from './profiles.ts';
import {
  customConnectorRows,
  findCustomConnector,
  insertCustomConnector,
  updateLiveCustomConnector,
  type CustomConnectorRow,
} from './repository.ts';

type StoredDocument = Pick<CustomConnector, 'icon' | 'logo' | 'endpoints'>;

function toCustomConnector(row: CustomConnectorRow): CustomConnector {
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

const notLive = (id: string) => notFound(`Custom connector ${id} does not exist or is deleted.`);

function documentOf(input: CustomConnectorInput): string {
  const document: StoredDocument = { icon: input.icon, logo: input.logo, endpoints: input.endpoints.map(toEndpoint) };
  return JSON.stringify(document);
}

/** Checks the profile and stores it. Run it in a transaction. */
export async function createCustomConnector(
  db: Executor,
  accountId: string,
  input: CustomConnectorInput,
): Promise<CustomConnector> {
  await assertValidProfile(db, accountId, input);
  const id = randomUUID();
  const time = now();
  await insertCustomConnector(db, {
    id,
    accountId,
    name: input.name,
    document: documentOf(input),
    deleted: 0,
    rowVersion: 0,
    deletedTime: null,
    lastModified: time,
    createdAt: time,
  });
  return requireCustomConnector(db, accountId, id);
}

/** The account's profiles by name; deleted ones only when asked for. */
export async function listCustomConnectors(db: Executor, accountId: string, includeDeleted: boolean): Promise<CustomConnector[]> {
  return (await customConnectorRows(db, accountId, includeDeleted)).map(toCustomConnector);
}

/** Profile `id` of the account, deleted or not, or a 404 (another account's answers as if it did not exist). */
export async function requireCustomConnector(db: Executor, accountId: string, id: string): Promise<CustomConnector> {
  const row = await findCustomConnector(db, accountId, id);
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

/** Checks the profile and replaces the stored one whole; a deleted profile cannot be changed (404). Run it in a transaction. */
export async function replaceCustomConnector(
  db: Executor,
  accountId: string,
  id: string,
  input: CustomConnectorInput,
): Promise<CustomConnector> {
  await assertValidProfile(db, accountId, input);
  const replaced = await updateLiveCustomConnector(db, accountId, id, {
    name: input.name,
    document: documentOf(input),
    lastModified: now(),
  });
  if (!replaced) throw notLive(id);
  return requireCustomConnector(db, accountId, id);
}

/** Marks the profile deleted; it stays readable, and listed when deleted ones are asked for. */
export async function deleteCustomConnector(db: Executor, accountId: string, id: string): Promise<void> {
  const time = now();
  const deleted = await updateLiveCustomConnector(db, accountId, id, { deleted: 1, deletedTime: time, lastModified: time });
  if (!deleted) throw notLive(id);
}
