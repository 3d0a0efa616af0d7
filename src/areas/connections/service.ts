/**
 * The connections' rules: which authType and details go with a connection's type, what of the details is kept
 * (secret references, never a value), unique names, environment overrides that must fit their connection, and
 * the vault secret a connection names for an environment. The SQL is the repository's.
 */
import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound, unprocessable } from '../../core/problems.ts';
import { offsetOf } from '../../core/paging.ts';
import { environmentIdsByName, environmentNamesById, requireEnvironmentId } from '../environments/index.ts';
import {
  VAULT_LOCATION_FIELDS,
  type AuthType,
  type ConnectionDetails,
  type ConnectionListQuery,
  type ConnectionOverride,
  type ConnectionOverrideListQuery,
  type CreateConnectionOverrideRequest,
  type CreateConnectionRequest,
  type PlatformConnectionType,
  type ProjectConnection,
  type UpdateConnectionRequest,
} from './schemas.ts';
import {
  deleteConnectionRow,
  deleteOverrideRow,
  findConnection,
  insertConnection,
  insertOverride,
  listConnectionRows,
  overrideDetails,
  overrideIdentity,
  overrideRowVersion,
  overrideRowsInProject,
  overrideRowsOf,
  updateConnectionRow,
  updateOverrideDetails,
  type ConnectionRow,
  type OverrideRow,
} from './repository.ts';

export interface OverrideKey {
  connectionName: string;
  environmentName: string;
}

const PROPERTY_NAMES = ['secretName', 'secretKey', 'credentialSecretName'] as const;
const PROPERTIES_OF: Record<PlatformConnectionType, readonly (typeof PROPERTY_NAMES)[number][]> = {
  COMPONENT_BASIC: ['secretName', 'secretKey'],
  CLOUD_PLATFORM_CREDENTIALS: ['credentialSecretName'],
};
const LOCATION_FIELDS = ['region', 'vaultName', 'gcpProjectId'] as const;

/** The rules the schema does not express: which authType goes with the type (CLOUD_PROVIDER_SECRET with cloud credentials only). */
function authTypeViolations(platformConnectionType: PlatformConnectionType, authType: AuthType): string[] {
  const cloud = platformConnectionType === 'CLOUD_PLATFORM_CREDENTIALS';
  return cloud === (authType === 'CLOUD_PROVIDER_SECRET')
    ? []
    : [`body.authType: ${authType} does not go with ${platformConnectionType}`];
}

/** The shape the type asks of connectionProperties, and the one field each vault type locates a secret by. */
function detailsViolations(
  platformConnectionType: PlatformConnectionType,
  details: ConnectionDetails | undefined,
  field: string,
): string[] {
  const violations: string[] = [];
  const properties = details?.connectionProperties;
  if (properties) {
    const allowed = PROPERTIES_OF[platformConnectionType];
    for (const name of PROPERTY_NAMES) {
      if (properties[name] !== undefined && !allowed.includes(name)) {
        violations.push(`${field}.connectionProperties.${name}: is not allowed for ${platformConnectionType}`);
      }
    }
    if (platformConnectionType === 'COMPONENT_BASIC' && properties.secretName === undefined) {
      violations.push(`${field}.connectionProperties.secretName: is required for COMPONENT_BASIC`);
    }
  }
  const location = details?.secretsLocation;
  if (location) {
    const needed = VAULT_LOCATION_FIELDS[location.type];
    for (const name of LOCATION_FIELDS) {
      if (name === needed && location[name] === undefined)
        violations.push(`${field}.secretsLocation.${name}: is required for ${location.type}`);
      if (name !== needed && location[name] !== undefined)
        violations.push(`${field}.secretsLocation.${name}: is not allowed for ${location.type}`);
    }
  }
  return violations;
}

function checkDetails(
  platformConnectionType: PlatformConnectionType,
  details: ConnectionDetails | undefined,
  field: string,
): void {
  const violations = detailsViolations(platformConnectionType, details, field);
  if (violations.length > 0) throw unprocessable(`The connection details do not fit ${platformConnectionType}.`, violations);
}

/** The details as stored: the known fields only, so nothing else a client sends (a secret value) is kept. */
function storedDetails(details: ConnectionDetails): string {
  const pick = <T extends object>(source: T | undefined, keys: readonly (keyof T)[]) =>
    source && Object.fromEntries(keys.filter((key) => source[key] !== undefined).map((key) => [key, source[key]]));
  return JSON.stringify({
    connectionProperties: pick(details.connectionProperties, PROPERTY_NAMES),
    description: details.description,
    secretsLocation: pick(details.secretsLocation, ['type', ...LOCATION_FIELDS]),
  });
}

function toConnection(row: ConnectionRow): ProjectConnection {
  return {
    authProvider: row.authProvider,
    authType: row.authType as AuthType,
    ...(row.connectionDetails !== null && { connectionDetails: JSON.parse(row.connectionDetails) as ConnectionDetails }),
    createdBy: row.createdBy,
    createdDate: row.createdAt,
    name: row.name,
    platformConnectionType: row.platformConnectionType as PlatformConnectionType,
    projectId: row.projectId,
  };
}

/** A `connectionNames` filter: comma-separated, blanks ignored. */
function namesOf(connectionNames: string): string[] {
  const names = connectionNames
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
  if (names.length === 0) throw badRequest('No connection is named.', ['connectionNames: must name at least one connection']);
  return names;
}

/** What a connection is made of, as create and full replacement (E1) write it. */
function connectionFields(request: UpdateConnectionRequest) {
  const violations = [
    ...authTypeViolations(request.platformConnectionType, request.authType),
    ...detailsViolations(request.platformConnectionType, request.connectionDetails, 'body.connectionDetails'),
  ];
  if (violations.length > 0) throw unprocessable(`The connection does not fit ${request.platformConnectionType}.`, violations);
  return {
    authProvider: request.authProvider ?? 'NONE',
    authType: request.authType,
    platformConnectionType: request.platformConnectionType,
    connectionDetails: request.connectionDetails ? storedDetails(request.connectionDetails) : null,
  };
}

export async function createConnection(db: Executor, projectId: string, createdBy: string, request: CreateConnectionRequest) {
  const row: ConnectionRow = {
    id: randomUUID(),
    projectId,
    name: request.name,
    ...connectionFields(request),
    createdBy,
    createdAt: now(),
    rowVersion: 0,
  };
  try {
    await insertConnection(db, row);
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`A connection named "${request.name}" already exists in this project.`);
    throw error;
  }
  return toConnection(row);
}

export async function listConnections(db: Executor, projectId: string, query: ConnectionListQuery) {
  const filter = {
    ...(query.authProvider !== undefined && { authProvider: query.authProvider }),
    ...(query.connectionNames !== undefined && { names: namesOf(query.connectionNames) }),
  };
  const { rows, total } = await listConnectionRows(db, projectId, filter, query);
  return { results: rows.map(toConnection), total };
}

async function requireConnection(db: Executor, projectId: string, name: string): Promise<ConnectionRow> {
  const row = await findConnection(db, projectId, name);
  if (!row) throw notFound(`Connection "${name}" does not exist in this project.`);
  return row;
}

/**
 * E1: replaces the connection whole; a field left out is unset. A change of platformConnectionType
 * must leave every environment override fitting it.
 */
export async function replaceConnection(db: Executor, projectId: string, name: string, request: UpdateConnectionRequest) {
  const row = await requireConnection(db, projectId, name);
  const fields = connectionFields(request);
  if (fields.platformConnectionType !== row.platformConnectionType) {
    const misfits = (await overridesOf(db, row.id)).filter(
      (override) => detailsViolations(fields.platformConnectionType, override.connectionDetails, 'connectionDetails').length > 0,
    );
    if (misfits.length > 0) {
      throw unprocessable(
        `Environment overrides of the connection do not fit ${fields.platformConnectionType}.`,
        misfits.map(
          (override) =>
            `environmentName: the override of "${override.environmentName}" does not fit ${fields.platformConnectionType}`,
        ),
      );
    }
  }
  await updateConnectionRow(db, row.id, fields);
  return toConnection({ ...row, ...fields });
}

/** E2: removes the connection; its environment overrides go with it (foreign keys cascade). */
export async function deleteConnection(db: Executor, projectId: string, name: string): Promise<void> {
  if (!(await deleteConnectionRow(db, projectId, name))) throw notFound(`Connection "${name}" does not exist in this project.`);
}

/** Overrides as answered: with the names of their environments (read through the environments area), by name. */
async function namedOverrides(db: Executor, rows: OverrideRow[]): Promise<ConnectionOverride[]> {
  const names = await environmentNamesById(
    db,
    rows.map((row) => row.environmentId),
  );
  const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return rows
    .flatMap((row) => {
      const environmentName = names.get(row.environmentId);
      return environmentName === undefined ? [] : [toOverride({ ...row, environmentName })];
    })
    .sort((a, b) => byName(a.connectionName, b.connectionName) || byName(a.environmentName, b.environmentName));
}

function toOverride(row: { connectionName: string; environmentName: string; connectionDetails: string }): ConnectionOverride {
  return {
    connectionName: row.connectionName,
    environmentName: row.environmentName,
    connectionDetails: JSON.parse(row.connectionDetails),
  };
}

async function overridesOf(db: Executor, connectionId: string): Promise<ConnectionOverride[]> {
  return namedOverrides(db, await overrideRowsOf(db, connectionId));
}

/** The connection and the environment an override is for, each or a 404. */
/** The row and version of the project's connection `name`, as If-Match compares it (core/conditional.ts). */
export async function connectionVersion(db: Executor, projectId: string, name: string) {
  const row = await findConnection(db, projectId, name);
  return row && { id: row.id, version: Number(row.rowVersion ?? 0) };
}

/** The row and version of a connection's override in an environment, as If-Match compares it. */
export async function overrideVersion(db: Executor, projectId: string, key: OverrideKey) {
  const connection = await findConnection(db, projectId, key.connectionName);
  const environmentId = (await environmentIdsByName(db, projectId, [key.environmentName])).get(key.environmentName);
  if (!connection || environmentId === undefined) return undefined;
  const version = await overrideRowVersion(db, connection.id, environmentId);
  return version === undefined ? undefined : { id: overrideIdentity(connection.id, environmentId), version };
}

async function requireOverrideTarget(db: Executor, projectId: string, key: OverrideKey) {
  const connection = await requireConnection(db, projectId, key.connectionName);
  const environmentId = await requireEnvironmentId(db, projectId, key.environmentName);
  return { connection, environmentId };
}

export async function createConnectionOverride(db: Executor, projectId: string, request: CreateConnectionOverrideRequest) {
  const { connection, environmentId } = await requireOverrideTarget(db, projectId, request);
  checkDetails(connection.platformConnectionType as PlatformConnectionType, request.connectionDetails, 'body.connectionDetails');
  const connectionDetails = storedDetails(request.connectionDetails);
  try {
    await insertOverride(db, { connectionId: connection.id, environmentId, connectionDetails });
  } catch (error) {
    if (isUniqueViolation(error)) {
      throw conflict(
        `Connection "${request.connectionName}" already has an override in environment "${request.environmentName}".`,
      );
    }
    throw error;
  }
  return toOverride({ ...request, connectionDetails });
}

export async function listConnectionOverrides(db: Executor, projectId: string, query: ConnectionOverrideListQuery) {
  // A project's overrides are at most its connections times its environments: they are read whole, named
  // and ordered (connection, then environment name), and the page is cut from them.
  let environmentId: string | undefined;
  if (query.environmentName !== undefined) {
    environmentId = (await environmentIdsByName(db, projectId, [query.environmentName])).get(query.environmentName);
    if (environmentId === undefined) return { results: [], total: 0 };
  }
  const filter = {
    ...(environmentId !== undefined && { environmentId }),
    ...(query.connectionNames !== undefined && { connectionNames: namesOf(query.connectionNames) }),
  };
  const all = await namedOverrides(db, await overrideRowsInProject(db, projectId, filter));
  const offset = offsetOf(query);
  return { results: all.slice(offset, offset + query.size), total: all.length };
}

/** Replaces the override whole: a field left out is unset. */
export async function replaceConnectionOverride(db: Executor, projectId: string, key: OverrideKey, details: ConnectionDetails) {
  const { connection, environmentId } = await requireOverrideTarget(db, projectId, key);
  checkDetails(connection.platformConnectionType as PlatformConnectionType, details, 'body.connectionDetails');
  const connectionDetails = storedDetails(details);
  if (!(await updateOverrideDetails(db, connection.id, environmentId, connectionDetails))) throw noOverride(key);
  return toOverride({ ...key, connectionDetails });
}

export async function deleteConnectionOverride(db: Executor, projectId: string, key: OverrideKey): Promise<void> {
  const { connection, environmentId } = await requireOverrideTarget(db, projectId, key);
  if (!(await deleteOverrideRow(db, connection.id, environmentId))) throw noOverride(key);
}

function noOverride(key: OverrideKey) {
  return notFound(`Connection "${key.connectionName}" has no override in environment "${key.environmentName}".`);
}

/**
 * The vault secret that connection `name` of the project names for environment `environmentId` (its
 * override there, else its own details): `{secretName, secretKey?}`, or undefined when there is no such
 * connection or it names no secret. What an agent resolves in its vault; never the secret itself.
 */
export async function connectionSecret(
  db: Executor,
  projectId: string,
  environmentId: string,
  name: string,
): Promise<{ secretName: string; secretKey?: string } | undefined> {
  const connection = await findConnection(db, projectId, name);
  if (!connection) return undefined;
  const text = (await overrideDetails(db, connection.id, environmentId)) ?? connection.connectionDetails;
  const properties = text === null ? undefined : (JSON.parse(text) as ConnectionDetails).connectionProperties;
  if (!properties?.secretName) return undefined;
  return { secretName: properties.secretName, ...(properties.secretKey && { secretKey: properties.secretKey }) };
}
