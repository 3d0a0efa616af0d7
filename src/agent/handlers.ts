/**
 * What the reference agent does with each kind of work the server hands it. A handler gets the work and a
 * context, and answers the result that is reported as `done`; throwing reports `failed` (with the error's
 * message and, when it has one, its `code`). Add a kind by adding an entry (registerWorkHandler).
 */
import { compactDecrypt } from 'jose';
import type { KeyObject } from 'node:crypto';
import type { SecretValue, VaultBackend } from './vault.ts';
import { executePipeline, executeTests } from './execution-handlers.ts';

export interface DeliveredWork {
  workId: string;
  kind: string;
  payload: unknown;
  /** 1 on the first delivery; more when an earlier delivery's lease lapsed without a final report. */
  delivery: number;
}

export interface WorkContext {
  /** Sends a progress report (it also keeps the work's lease alive). */
  report(body: unknown): Promise<void>;
  /** Aborts when the server says the work was cancelled, or the agent is stopping. */
  signal: AbortSignal;
  vault: VaultBackend;
  log(message: string, fields?: Record<string, unknown>): void;
  /** The agent's private key, matching the certificate it registered: what secrets are encrypted for. */
  privateKey: KeyObject;
}

export type WorkHandler = (work: DeliveredWork, ctx: WorkContext) => Promise<unknown>;

/** A failure the handler names with a code the server understands (e.g. secret-exists). */
export class WorkFailure extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

interface WriteSecretPayload {
  name: string;
  key: string;
  overwrite: boolean;
  /** Compact JWE (RSA-OAEP-256, A256GCM) for the agent's certificate; its plaintext is {"value": ...}. */
  jwe: string;
}

/** Decrypts a secret sent by the server with the agent's private key and writes it to the vault. */
const writeSecret: WorkHandler = async (work, ctx) => {
  const payload = work.payload as WriteSecretPayload;
  const { plaintext } = await compactDecrypt(payload.jwe, ctx.privateKey, {
    keyManagementAlgorithms: ['RSA-OAEP-256'],
    contentEncryptionAlgorithms: ['A256GCM'],
  });
  const { value } = JSON.parse(new TextDecoder().decode(plaintext)) as { value: SecretValue };
  ctx.signal.throwIfAborted();
  const written = await ctx.vault.write(payload.name, payload.key, value, { overwrite: payload.overwrite }).catch((error) => {
    throw (error as { code?: string }).code === 'secret-exists'
      ? new WorkFailure((error as Error).message, 'secret-exists')
      : error;
  });
  ctx.log('secret written to the vault', { name: payload.name, key: payload.key });
  return written;
};

interface SecretReference {
  secretName: string;
  secretKey?: string;
}

interface StreamingPipelinePayload {
  streamingPipelineId: string;
  definition: {
    streamingSource: { connection: { password: SecretReference } };
    streamingTarget: { accountKey?: SecretReference };
  };
}

/**
 * Streaming pipelines this agent process runs. The reference agent does not move data: starting checks
 * that every secret the definition refers to is in the vault and records the pipeline as running here.
 */
const runningPipelines = new Set<string>();

const startStreamingPipeline: WorkHandler = async (work, ctx) => {
  const { streamingPipelineId, definition } = work.payload as StreamingPipelinePayload;
  const references = [definition.streamingSource.connection.password, definition.streamingTarget.accountKey].filter(
    (reference): reference is SecretReference => reference !== undefined,
  );
  for (const reference of references) {
    const key = reference.secretKey ?? 'value';
    if ((await ctx.vault.read(reference.secretName, key)) === undefined) {
      throw new WorkFailure(`secret ${reference.secretName} (key ${key}) is not in the vault`, 'secret-missing');
    }
  }
  runningPipelines.add(streamingPipelineId);
  ctx.log('streaming pipeline started', { streamingPipelineId });
  return { state: 'RUNNING' };
};

const stopStreamingPipeline: WorkHandler = async (work, ctx) => {
  const { streamingPipelineId } = work.payload as StreamingPipelinePayload;
  runningPipelines.delete(streamingPipelineId);
  ctx.log('streaming pipeline stopped', { streamingPipelineId });
  return { state: 'STOPPED' };
};

const handlers = new Map<string, WorkHandler>([
  ['write-secret', writeSecret],
  ['streaming-pipeline-start', startStreamingPipeline],
  ['streaming-pipeline-stop', stopStreamingPipeline],
  // Referred to lazily: execution-handlers.ts imports WorkFailure from here.
  ['execute-pipeline', (work, ctx) => executePipeline(work, ctx)],
  ['execute-tests', (work, ctx) => executeTests(work, ctx)],
]);

export function registerWorkHandler(kind: string, handler: WorkHandler): void {
  handlers.set(kind, handler);
}

export function workHandler(kind: string): WorkHandler | undefined {
  return handlers.get(kind);
}
