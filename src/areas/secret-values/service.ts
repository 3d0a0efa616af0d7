/**
 * E15's rules: a secret value is encrypted for the agent's certificate, handed to the agent as work, and the
 * write waits (at most the configured time) for the agent's confirmation, which it reads from the store so
 * that any server instance may have recorded it. Every outcome is a distinct answer: written, certainly not
 * written, or perhaps written.
 */
import { createHash, X509Certificate } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { CompactEncrypt } from 'jose';
import type { Db } from '../../core/db/database.ts';
import { ProblemError } from '../../core/problems.ts';
import { FAILURE_CODES, WORK_KINDS, type WriteSecretPayload } from '../../contract/work.ts';
import {
  type AgentWork,
  cancelAgentWork,
  enqueueAgentWork,
  findAgentWork,
  isConnected,
  isPaused,
  requireAgent,
} from '../agents/index.ts';

/** How often the waiting request looks for the agent's confirmation in the store. */
const CONFIRMATION_POLL_MS = 100;

/** The value encrypted for the agent's certificate: compact JWE, RSA-OAEP-256 with A256GCM. */
async function encryptFor(certificatePem: string, value: unknown): Promise<string> {
  const certificate = new X509Certificate(certificatePem);
  return new CompactEncrypt(new TextEncoder().encode(JSON.stringify({ value })))
    .setProtectedHeader({
      alg: 'RSA-OAEP-256',
      enc: 'A256GCM',
      'x5t#S256': createHash('sha256').update(certificate.raw).digest('base64url'),
    })
    .encrypt(certificate.publicKey);
}

/** The answer to a secret write once the agent's final report is in. */
function outcome(work: AgentWork, requestedName: string) {
  const result = (work.result ?? {}) as { resolverRef?: unknown; vaultSecretName?: unknown; code?: string; message?: string };
  if (work.state === 'done') {
    const { resolverRef, vaultSecretName } = result;
    if (typeof resolverRef === 'string' && resolverRef !== '' && vaultSecretName === requestedName) {
      return { resolver_ref: resolverRef, vaultSecretName };
    }
    // The agent says it wrote the value, but its confirmation does not say where, or names another secret.
    throw new ProblemError(
      502,
      typeof resolverRef !== 'string' || resolverRef === '' || typeof vaultSecretName !== 'string'
        ? 'The agent reported the secret written, but its confirmation lacks resolverRef or vaultSecretName; it MAY have been written.'
        : `The agent reported the secret written under another name than "${requestedName}"; it MAY have been written there.`,
      { name: 'secret-write-bad-confirmation' },
    );
  }
  if (result.code === FAILURE_CODES.secretExists) {
    throw new ProblemError(
      409,
      'The vault secret already has this key; nothing was written. Send overwrite=true to replace it.',
      {
        name: 'secret-exists',
      },
    );
  }
  throw new ProblemError(
    502,
    `The agent could not write the secret; nothing was written: ${result.message ?? 'no reason given'}.`,
    {
      name: 'secret-write-failed',
    },
  );
}

/** The agent was deleted while the write waited: its work went with it, and it can no longer report. */
function agentDeleted(agentId: string, lastState: string) {
  return new ProblemError(
    409,
    lastState === 'queued'
      ? `The agent ${agentId} was deleted before it took the secret (as last seen, ${CONFIRMATION_POLL_MS} ms before); the secret was NOT written.`
      : `The agent ${agentId} was deleted after it took the secret, before it confirmed; it MAY have been written to its vault.`,
    { name: 'agent-deleted' },
  );
}

export interface SecretWriteContext {
  db: Db;
  /** How long the write waits for the agent's confirmation (DPC_SECRET_WRITE_TIMEOUT_SECONDS). */
  timeoutSeconds: number;
  /** How recent an agent's last contact must be for it to count as connected. */
  connectedWindowSeconds: number;
}

export interface SecretWrite {
  accountId: string;
  agentId: string;
  secret: { name: string; key: string; type: string; value: unknown };
  overwrite: boolean;
}

/**
 * Writes a secret value to the agent's vault and answers the agent's confirmation ({resolver_ref,
 * vaultSecretName}), or throws the problem that says what happened. `onQueued` learns the work id as soon
 * as the work is queued (the audit trail keeps it whatever the outcome).
 */
export async function writeSecretValue(
  context: SecretWriteContext,
  write: SecretWrite,
  onQueued: (workId: string) => void = () => {},
) {
  const { accountId, agentId, secret, overwrite } = write;
  const { db, timeoutSeconds, connectedWindowSeconds } = context;
  const agent = await requireAgent(db, accountId, agentId);
  if (!agent.certificatePem) {
    throw new ProblemError(409, 'The agent has not registered a certificate yet, so nothing can be encrypted for it.', {
      name: 'agent-has-no-certificate',
    });
  }
  if (isPaused(agent)) {
    throw new ProblemError(409, `The agent is paused until ${agent.pausedUntil}; it takes no work.`, {
      name: 'agent-paused',
    });
  }
  if (!isConnected(agent, connectedWindowSeconds)) {
    throw new ProblemError(503, 'The agent is not connected; nothing was written. Start the agent and try again.', {
      name: 'agent-not-connected',
    });
  }
  const jwe = await encryptFor(agent.certificatePem, secret.value);
  const workId = await db.transaction().execute((trx) =>
    enqueueAgentWork(trx, {
      accountId,
      agentId,
      kind: WORK_KINDS.writeSecret,
      payload: {
        name: secret.name,
        key: secret.key,
        type: secret.type,
        overwrite,
        jwe,
      } satisfies WriteSecretPayload,
    }),
  );
  onQueued(workId);
  const deadline = Date.now() + timeoutSeconds * 1000;
  let lastState = 'queued';
  while (Date.now() < deadline) {
    const work = await findAgentWork(db, workId);
    if (!work) throw agentDeleted(agentId, lastState);
    if (work.state === 'done' || work.state === 'failed') return outcome(work, secret.name);
    lastState = work.state;
    await sleep(CONFIRMATION_POLL_MS);
  }
  const cancelled = await db.transaction().execute((trx) => cancelAgentWork(trx, workId));
  if (cancelled === 'unknown') throw agentDeleted(agentId, lastState);
  if (cancelled === 'finished') return outcome((await findAgentWork(db, workId))!, secret.name);
  if (cancelled === 'cancelled') {
    throw new ProblemError(
      504,
      `The agent did not take the secret within ${timeoutSeconds} s; it was withdrawn and NOT written.`,
      {
        name: 'secret-not-written',
      },
    );
  }
  throw new ProblemError(
    504,
    `The agent took the secret but did not confirm within ${timeoutSeconds} s; it MAY have been written. ` +
      'The agent is told to stop; write it again (overwrite=true) to be sure.',
    { name: 'secret-write-unconfirmed' },
  );
}
