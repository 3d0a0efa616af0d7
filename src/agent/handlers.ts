/**
 * What the reference agent does with each kind of work the server hands it. A handler gets the work and a
 * context, and answers the result that is reported as `done`; throwing reports `failed` (with the error's
 * message and, when it has one, its `code`). The kinds are the contract's (src/contract/work.ts): one entry each.
 */
import { compactDecrypt } from 'jose';
import { FAILURE_CODES, WORK_KINDS, type WorkKind, type WriteSecretPayload } from '../contract/work.ts';
import type { SecretValue } from './vault.ts';
import { executePipeline, executeTests } from './execution-handlers.ts';
import { dropStreamingSlot, startStreamingPipeline, stopStreamingPipeline } from './streaming/handlers.ts';
import { WorkFailure, type WorkHandler } from './work-context.ts';

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
      ? new WorkFailure((error as Error).message, FAILURE_CODES.secretExists)
      : error;
  });
  ctx.log('secret written to the vault', { name: payload.name, key: payload.key });
  return written;
};

/** One handler for every kind of work in the contract: a kind the contract adds fails to compile here until handled. */
const handlers = new Map<string, WorkHandler>(
  Object.entries({
    [WORK_KINDS.writeSecret]: writeSecret,
    [WORK_KINDS.startStreamingPipeline]: startStreamingPipeline,
    [WORK_KINDS.stopStreamingPipeline]: stopStreamingPipeline,
    [WORK_KINDS.dropStreamingSlot]: dropStreamingSlot,
    [WORK_KINDS.executePipeline]: executePipeline,
    [WORK_KINDS.executeTests]: executeTests,
  } satisfies Record<WorkKind, WorkHandler>),
);

export function workHandler(kind: string): WorkHandler | undefined {
  return handlers.get(kind);
}
