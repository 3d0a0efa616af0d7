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
import { objectStoreFor } from './object-store.ts';
import { runMysqlPipeline } from './mysql.ts';
import { runPostgresPipeline, slotNameOf } from './pipeline.ts';
import { PostgresSource, SourceNotReady, type TableName } from './postgres.ts';
import { removeState } from './state.ts';

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

async function targetStoreOf(target: TargetDefinition, ctx: WorkContext) {
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
  return store;
}

/** The runs of this agent process, by pipeline: how to stop each and when it has ended. */
const runs = new Map<string, { stop: AbortController; ended: Promise<unknown> }>();

export const startStreamingPipeline: WorkHandler = async (work, ctx) => {
  const { streamingPipelineId, definition } = work.payload as StreamingPipelinePayload;
  const source = definition.streamingSource as SourceDefinition;
  const target = definition.streamingTarget as TargetDefinition;
  for (const reference of secretReferencesIn([source, target])) await readSecret(ctx.vault, reference);
  requireSupportedSource(source);
  const store = await targetStoreOf(target, ctx);
  const earlier = runs.get(streamingPipelineId);
  if (earlier) {
    earlier.stop.abort();
    await earlier.ended.catch(() => undefined);
  }
  const stop = new AbortController();
  const signal = AbortSignal.any([stop.signal, ctx.signal]);
  const common = {
    pipelineId: streamingPipelineId,
    tables: source.tables,
    advancedProperties: definition.advancedProperties ?? {},
    prefix: target.prefix ?? '',
    stateDir: ctx.stateDir,
    target: store,
    signal,
    report: (progress: StreamingProgress) => void ctx.report(progress).catch(() => undefined),
    log: (message: string, fields?: Record<string, unknown>) => ctx.log(message, { streamingPipelineId, ...fields }),
  };
  const ended = (async () => {
    try {
      if (source.type === 'mysql') {
        const { connection } = source;
        return await runMysqlPipeline({
          ...common,
          connection: {
            host: connection.host,
            port: connection.port,
            user: connection.username,
            password: await passwordOf(source, ctx.vault),
          },
        });
      }
      return await runPostgresPipeline({ ...common, source: await postgresSourceOf(source, ctx.vault) });
    } catch (error) {
      if (error instanceof SourceNotReady) throw new WorkFailure(error.message, FAILURE_CODES.sourceNotReady);
      throw error;
    }
  })();
  runs.set(streamingPipelineId, { stop, ended });
  ctx.log('streaming pipeline started', { streamingPipelineId, delivery: work.delivery });
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
