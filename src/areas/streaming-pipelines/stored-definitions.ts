import { exactCheck } from '../../core/validation.ts';
import { StreamingSource, StreamingTarget } from './schemas.ts';

/**
 * Definitions as they were stored before the vendor's provider's schemas (issue 29): `type` in upper case
 * and the specification's names (POSTGRES, AZURE_BLOB, …), the database in the JDBC properties, loose
 * fields. Reads must not fail on them: a stored definition is upgraded where the mapping is certain, and
 * what still does not fit its type's schema is answered as stored, with the problems named, so that a
 * user can see it and write it again (a start of such a pipeline is refused with the same problems).
 */

const SOURCE_TYPES: Record<string, string> = {
  postgres: 'postgres',
  postgresql: 'postgres',
  mysql: 'mysql',
  mariadb: 'mysql',
  sqlserver: 'sqlserver',
  sql_server: 'sqlserver',
  mssql: 'sqlserver',
  oracle: 'oracle',
  db2ibmi: 'db2ibmi',
  db2_ibm_i: 'db2ibmi',
};

const TARGET_TYPES: Record<string, string> = {
  s3: 's3',
  abs: 'abs',
  azure_blob: 'abs',
  azureblob: 'abs',
  snowflake: 'snowflake',
};

/** Source types whose connection names a database (the others name none). */
const WITH_DATABASE = new Set(['postgres', 'sqlserver', 'oracle']);
const DATABASE_PROPERTIES = ['database', 'databaseName', 'dbname'];

const checkSource = exactCheck(StreamingSource);
const checkTarget = exactCheck(StreamingTarget);

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function upgradedType(value: unknown, types: Record<string, string>): unknown {
  return typeof value === 'string' ? (types[value.toLowerCase()] ?? value) : value;
}

function upgradeSource(stored: unknown): unknown {
  if (!isObject(stored)) return stored;
  const source: Json = { ...stored, type: upgradedType(stored.type, SOURCE_TYPES) };
  const connection = stored.connection;
  if (isObject(connection) && typeof source.type === 'string' && WITH_DATABASE.has(source.type) && !connection.database) {
    const properties = isObject(connection.jdbcProperties) ? connection.jdbcProperties : {};
    const name = DATABASE_PROPERTIES.find((property) => typeof properties[property] === 'string');
    if (name) {
      const { [name]: database, ...rest } = properties;
      const { jdbcProperties: _stored, ...fields } = connection;
      source.connection = { ...fields, database, ...(Object.keys(rest).length > 0 && { jdbcProperties: rest }) };
    }
  }
  return source;
}

function upgradeTarget(stored: unknown): unknown {
  if (!isObject(stored)) return stored;
  return { ...stored, type: upgradedType(stored.type, TARGET_TYPES) };
}

function problemsOf(check: ReturnType<typeof exactCheck>, value: unknown, field: string): string[] {
  // The check may remove unknown properties (removeAdditional) and fill defaults: it works on a copy.
  const copy = structuredClone(value);
  if (check(copy)) return [];
  return (check.errors ?? []).map((error) => {
    const at = error.instancePath ? `${field}${error.instancePath.replaceAll('/', '.')}` : field;
    return `${at}: ${error.message ?? 'is not valid'}`;
  });
}

export interface StoredDefinition {
  definition: {
    advancedProperties: Record<string, string>;
    streamingSource: unknown;
    streamingTarget: unknown;
  };
  /** Empty when the definition fits its types' schemas; otherwise what does not, by field. */
  problems: string[];
}

/** A stored definition (JSON text), upgraded from older shapes where certain, with what still does not fit. */
export function readStoredDefinition(json: string): StoredDefinition {
  const stored = JSON.parse(json) as Json;
  const definition = {
    advancedProperties: isObject(stored.advancedProperties) ? (stored.advancedProperties as Record<string, string>) : {},
    streamingSource: upgradeSource(stored.streamingSource),
    streamingTarget: upgradeTarget(stored.streamingTarget),
  };
  const problems = [
    ...problemsOf(checkSource, definition.streamingSource, 'streamingSource'),
    ...problemsOf(checkTarget, definition.streamingTarget, 'streamingTarget'),
  ];
  return { definition, problems: [...new Set(problems)] };
}
