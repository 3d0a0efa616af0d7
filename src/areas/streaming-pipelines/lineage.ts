/**
 * A streaming pipeline's lineage, named by the server from the definition it holds: each source table
 * (`<type>://host:port`, `database.schema.table`) and the target dataset its changes are written to
 * (the change files' folder in the bucket or container, or the Snowflake table). The agent's reports only
 * say which tables got rows, and those are checked against the definition (trust: a report cannot name a
 * dataset of another pipeline).
 */
import { badRequest } from '../../core/problems.ts';
import type { LineageDataset } from '../../contract/lineage.ts';

interface SourceDefinition {
  type: string;
  connection: { host: string; port: number; database?: string };
  tables: { schema: string; table: string }[];
}

type TargetDefinition =
  | { type: 's3'; bucket: string; prefix?: string }
  | { type: 'abs'; accountName: string; container: string; prefix?: string }
  | { type: 'snowflake'; connection: { accountName: string }; database: string; tableSchema: string };

export const tableKey = (schema: string, table: string) => `${schema}.${table}`;

/** Where the agent writes a table's change files: `<prefix>/<schema>/<table>` (src/agent/streaming's layout). */
function folderOf(prefix: string | undefined, schema: string, table: string): string {
  const base = (prefix ?? '').replace(/^\/+/, '').replace(/\/*$/, '');
  return `${base ? `${base}/` : ''}${schema}/${table}`;
}

function sourceDataset(source: SourceDefinition, schema: string, table: string): LineageDataset {
  const { host, port, database } = source.connection;
  // MySQL and Db2 for IBM i name no database: their schema is the database.
  return {
    namespace: `${source.type}://${host}:${port}`,
    name: database ? `${database}.${schema}.${table}` : `${schema}.${table}`,
  };
}

function targetDataset(target: TargetDefinition, schema: string, table: string): LineageDataset | undefined {
  switch (target.type) {
    case 's3':
      return { namespace: `s3://${target.bucket}`, name: folderOf(target.prefix, schema, table) };
    case 'abs':
      return {
        namespace: `abfss://${target.container}@${target.accountName}.dfs.core.windows.net`,
        name: folderOf(target.prefix, schema, table),
      };
    case 'snowflake':
      return {
        namespace: `snowflake://${target.connection.accountName}`,
        name: `${target.database}.${target.tableSchema}.${table}`,
      };
    default:
      return undefined;
  }
}

/**
 * The datasets of `tables` (keys `schema.table`; all the definition's when undefined): their sources as
 * inputs, their targets as outputs.
 */
export function streamingDatasets(
  definition: { streamingSource: unknown; streamingTarget: unknown },
  tables?: ReadonlySet<string>,
): { inputs: LineageDataset[]; outputs: LineageDataset[] } {
  const source = definition.streamingSource as SourceDefinition;
  const target = definition.streamingTarget as TargetDefinition;
  const inputs: LineageDataset[] = [];
  const outputs: LineageDataset[] = [];
  for (const { schema, table } of source.tables ?? []) {
    if (tables && !tables.has(tableKey(schema, table))) continue;
    inputs.push(sourceDataset(source, schema, table));
    const written = targetDataset(target, schema, table);
    if (written) outputs.push(written);
  }
  return { inputs, outputs };
}

/**
 * The tables a progress report says got their first rows of this run (0 or none before, more now), after
 * checking that every table it names is one of the definition's: 400 naming the field otherwise.
 */
export function tablesFirstWritten(
  definition: { streamingSource: unknown },
  before: Record<string, number> | undefined,
  now: Record<string, number>,
): Set<string> {
  const source = definition.streamingSource as SourceDefinition;
  const known = new Set((source.tables ?? []).map(({ schema, table }) => tableKey(schema, table)));
  const unknown = Object.keys(now).filter((key) => !known.has(key));
  if (unknown.length > 0) {
    throw badRequest(
      'The report names tables that are not the pipeline’s.',
      unknown.map((key) => `body.rowsPerTable.${key}: not a table of this streaming pipeline`),
    );
  }
  return new Set(Object.keys(now).filter((key) => now[key] > 0 && !((before?.[key] ?? 0) > 0)));
}
