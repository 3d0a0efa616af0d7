/**
 * The reference agent's streaming work: start (the run: held for as long as the pipeline runs, reporting
 * progress), stop (ends the run in this process) and drop-slot (after DELETE ...?dropSlot=true).
 */
import {
  SUPPORTED_STREAMING_SOURCES,
  type StreamingPipelinePayload,
  type StreamingProgress,
  type StreamingSecretReference,
  type StreamingSlotDropped,
} from '../../contract/streaming.ts';
import { FAILURE_CODES } from '../../contract/work.ts';
import type { SecretValue, VaultBackend } from '../vault.ts';
import { WorkFailure, type WorkContext, type WorkHandler } from '../work-context.ts';
import { openWarehouse } from '../warehouse/index.ts';
import { objectStoreFor } from './object-store.ts';
import { describeMysqlTable, runMysqlPipeline } from './mysql.ts';
import { runPostgresPipeline, slotNameOf } from './pipeline.ts';
import { PostgresSource, SourceNotReady, type TableName } from './postgres.ts';
import { removeState } from './state.ts';
import { FILE_FORMATS, FileTarget, type ChangeTarget, type FileFormat } from './target.ts';
import {
  TABLE_PREFIX_TYPES,
  TEMPORAL_MAPPINGS,
  TRANSFORMATION_TYPES,
  TargetRefused,
  WarehouseTarget,
  type SourceCatalog,
} from './warehouse-target.ts';

/** The advanced property that chooses the change files' format. */
const FILE_FORMAT_PROPERTY = 'file.format';

/** Every secret reference in a definition, wherever its source or target type keeps one (password, accountKey, privateKey, ...). */
function secretReferencesIn(value: unknown): StreamingSecretReference[] {
  if (Array.isArray(value)) return value.flatMap(secretReferencesIn);
  if (!value || typeof value !== 'object') return [];
  if (typeof (value as StreamingSecretReference).secretName === 'string') return [value as StreamingSecretReference];
  return Object.values(value).flatMap(secretReferencesIn);
}

const keyOf = (reference: StreamingSecretReference) => reference.secretKey ?? reference.key ?? 'value';

async function readSecret(vault: VaultBackend, reference: StreamingSecretReference): Promise<SecretValue> {
  const value = await vault.read(reference.secretName, keyOf(reference));
  if (value === undefined) {
    throw new WorkFailure(
      `secret ${reference.secretName} (key ${keyOf(reference)}) is not in the vault`,
      FAILURE_CODES.secretMissing,
    );
  }
  return value;
}

interface SourceDefinition {
  type: string;
  connection: {
    host: string;
    port: number;
    database?: string;
    username: string;
    password?: StreamingSecretReference;
    jdbcProperties?: Record<string, string>;
  };
  tables: TableName[];
}

interface TargetDefinition {
  type: string;
  bucket?: string;
  prefix?: string;
  /** abs */
  accountName?: string;
  accountKey?: StreamingSecretReference;
  container?: string;
  /** snowflake */
  tableSchema?: string;
  tablePrefixType?: string;
  transformationType?: string;
  temporalMapping?: string;
}

async function passwordOf(source: SourceDefinition, vault: VaultBackend): Promise<string | undefined> {
  const { connection } = source;
  if (!connection.password) return undefined;
  const value = await readSecret(vault, connection.password);
  const password = typeof value === 'string' ? value : value.password;
  if (password === undefined)
    throw new WorkFailure(`secret ${connection.password.secretName} holds no password`, FAILURE_CODES.secretMissing);
  return password;
}

async function postgresSourceOf(source: SourceDefinition, vault: VaultBackend): Promise<PostgresSource> {
  const { connection } = source;
  const password = await passwordOf(source, vault);
  const sslmode = connection.jdbcProperties?.sslmode ?? connection.jdbcProperties?.ssl;
  return new PostgresSource({
    host: connection.host,
    port: connection.port,
    database: connection.database ?? 'postgres',
    user: connection.username,
    password,
    ssl: sslmode !== undefined && !['disable', 'false', 'allow', 'prefer'].includes(sslmode.toLowerCase()),
  });
}

function requireSupportedSource(source: SourceDefinition): void {
  if (!(SUPPORTED_STREAMING_SOURCES as readonly string[]).includes(source.type)) {
    throw new WorkFailure(`source type ${source.type} is not supported by this agent`, FAILURE_CODES.notSupported);
  }
}

/** One of `known` (either case), or a refusal naming the field and its value. */
function oneOf<T extends string>(field: string, value: string | undefined, known: readonly T[], fallback?: T): T {
  const given = value === undefined || value === '' ? fallback : (value.toLowerCase() as T);
  if (given === undefined || !known.includes(given)) {
    throw new WorkFailure(
      `streamingTarget.${field} is ${value ?? 'missing'}; this agent knows ${known.join(', ')}`,
      FAILURE_CODES.notSupported,
    );
  }
  return given;
}

/** `advancedProperties["file.format"]`: how change files are written (JSON lines unless it says parquet). */
export function fileFormatOf(payload: StreamingPipelinePayload): FileFormat {
  const value = payload.definition.advancedProperties?.[FILE_FORMAT_PROPERTY];
  if (value === undefined) return 'jsonl';
  if ((FILE_FORMATS as readonly string[]).includes(value)) return value as FileFormat;
  throw new WorkFailure(
    `advancedProperties.${FILE_FORMAT_PROPERTY} is ${value}; this agent writes ${FILE_FORMATS.join(' or ')}`,
    FAILURE_CODES.notSupported,
  );
}

/**
 * The change target of a definition: files in the agent's object store for `s3`; for `snowflake`, tables in
 * the agent's own warehouse (the one its pipelines run on when their environment names none), standing in
 * for Snowflake; for `abs`, files in an Azure Blob container.
 */
async function changeTargetOf(
  target: TargetDefinition,
  source: SourceDefinition,
  payload: StreamingPipelinePayload,
  catalog: SourceCatalog,
  ctx: WorkContext,
): Promise<ChangeTarget> {
  const format = fileFormatOf(payload);
  if (target.type === 'snowflake') {
    const transformationType = oneOf('transformationType', target.transformationType, TRANSFORMATION_TYPES);
    const temporalMapping = oneOf('temporalMapping', target.temporalMapping, TEMPORAL_MAPPINGS, 'native');
    const tablePrefixType = oneOf('tablePrefixType', target.tablePrefixType, TABLE_PREFIX_TYPES, 'none');
    if (!target.tableSchema) throw new WorkFailure('streamingTarget.tableSchema is missing', FAILURE_CODES.notSupported);
    const warehouse = await openWarehouse(undefined, {
      stateDir: ctx.stateDir,
      vault: ctx.vault,
      accountId: payload.accountId ?? 'default',
      environmentId: 'default',
      statementTimeoutMs: ctx.statementTimeoutMs,
      defaultWarehouseUrl: ctx.defaultWarehouseUrl,
      warehouseRoleKey: ctx.warehouseRoleKey,
      sandboxed: ctx.sandboxed,
    });
    return new WarehouseTarget({
      warehouse,
      pipelineId: payload.streamingPipelineId,
      schema: target.tableSchema,
      tablePrefixType,
      sourceDatabase: source.type === 'postgres' ? (source.connection.database ?? 'postgres') : undefined,
      transformationType,
      temporalMapping,
      catalog,
    });
  }
  if (target.type === 'abs') {
    if (!target.accountName || !target.container || !target.accountKey) {
      throw new WorkFailure('streamingTarget needs accountName, accountKey and container', FAILURE_CODES.notSupported);
    }
    const value = await readSecret(ctx.vault, target.accountKey);
    const accountKey = typeof value === 'string' ? value : value.password;
    if (!accountKey) {
      throw new WorkFailure(`secret ${target.accountKey.secretName} holds no account key`, FAILURE_CODES.secretMissing);
    }
    // Loaded here: the Azure client stays out of the start of agents that never write to Azure.
    const { AzureBlobStore } = await import('./abs-store.ts');
    const store = new AzureBlobStore({
      accountName: target.accountName,
      accountKey,
      container: target.container,
      endpoint: ctx.blobEndpoint,
    });
    return new FileTarget(store, target.prefix ?? '', format);
  }
  if (target.type !== 's3') {
    throw new WorkFailure(`target type ${target.type} is not supported by this agent`, FAILURE_CODES.notSupported);
  }
  const store = await objectStoreFor(ctx.objectStore, target.bucket ?? '');
  if (!store) {
    throw new WorkFailure(
      'this agent has no object store for s3 targets: start it with --object-store (or DPC_AGENT_OBJECT_STORE)',
      FAILURE_CODES.notSupported,
    );
  }
  return new FileTarget(store, target.prefix ?? '', format);
}

/** The runs of this agent process, by pipeline: how to stop each and when it has ended. */
const runs = new Map<string, { stop: AbortController; ended: Promise<unknown> }>();

export const startStreamingPipeline: WorkHandler = async (work, ctx) => {
  const payload = work.payload as StreamingPipelinePayload;
  const { streamingPipelineId, definition } = payload;
  const source = definition.streamingSource as SourceDefinition;
  const target = definition.streamingTarget as TargetDefinition;
  for (const reference of secretReferencesIn([source, target])) await readSecret(ctx.vault, reference);
  requireSupportedSource(source);
  const mysqlConnection =
    source.type === 'mysql'
      ? {
          host: source.connection.host,
          port: source.connection.port,
          user: source.connection.username,
          password: await passwordOf(source, ctx.vault),
        }
      : undefined;
  const postgres = mysqlConnection ? undefined : await postgresSourceOf(source, ctx.vault);
  const catalog: SourceCatalog = mysqlConnection
    ? { describe: (table) => describeMysqlTable(mysqlConnection, table) }
    : { describe: (table) => postgres!.describe(table) };
  const earlier = runs.get(streamingPipelineId);
  if (earlier) {
    earlier.stop.abort();
    await earlier.ended.catch(() => undefined);
  }
  const changeTarget = await changeTargetOf(target, source, payload, catalog, ctx);
  const stop = new AbortController();
  const signal = AbortSignal.any([stop.signal, ctx.signal]);
  const common = {
    pipelineId: streamingPipelineId,
    tables: source.tables,
    advancedProperties: definition.advancedProperties ?? {},
    stateDir: ctx.stateDir,
    target: changeTarget,
    signal,
    report: (progress: StreamingProgress) => void ctx.report(progress).catch(() => undefined),
    log: (message: string, fields?: Record<string, unknown>) => ctx.log(message, { streamingPipelineId, ...fields }),
  };
  const ended = (async () => {
    try {
      if (mysqlConnection) return await runMysqlPipeline({ ...common, connection: mysqlConnection });
      return await runPostgresPipeline({ ...common, source: postgres! });
    } catch (error) {
      if (error instanceof SourceNotReady) throw new WorkFailure(error.message, FAILURE_CODES.sourceNotReady);
      if (error instanceof TargetRefused) throw new WorkFailure(error.message, FAILURE_CODES.notSupported);
      throw error;
    } finally {
      await changeTarget.close().catch(() => undefined);
    }
  })();
  runs.set(streamingPipelineId, { stop, ended });
  ctx.log('streaming pipeline started', { streamingPipelineId, delivery: work.delivery, target: changeTarget.describe() });
  try {
    const end = await ended;
    ctx.log('streaming pipeline ended', { streamingPipelineId, position: end.position });
    return end;
  } finally {
    if (runs.get(streamingPipelineId)?.ended === ended) runs.delete(streamingPipelineId);
  }
};

export const stopStreamingPipeline: WorkHandler = async (work, ctx) => {
  const { streamingPipelineId } = work.payload as StreamingPipelinePayload;
  const run = runs.get(streamingPipelineId);
  if (run) {
    run.stop.abort();
    await run.ended.catch(() => undefined);
  }
  ctx.log('streaming pipeline stopped', { streamingPipelineId, wasRunning: run !== undefined });
  return { state: 'STOPPED' };
};

export const dropStreamingSlot: WorkHandler = async (work, ctx): Promise<StreamingSlotDropped> => {
  const { streamingPipelineId, definition } = work.payload as StreamingPipelinePayload;
  const source = definition.streamingSource as SourceDefinition;
  requireSupportedSource(source);
  if (source.type === 'mysql') {
    // A binlog reader holds nothing at the source: only the position in the state folder goes.
    await removeState(ctx.stateDir, streamingPipelineId);
    return { slot: '', dropped: false, publication: '' };
  }
  const slot = slotNameOf(streamingPipelineId);
  const dropped = await (await postgresSourceOf(source, ctx.vault)).dropSlot(slot, slot);
  await removeState(ctx.stateDir, streamingPipelineId);
  ctx.log('replication slot dropped', { streamingPipelineId, slot, dropped });
  return { slot, dropped, publication: slot };
};
