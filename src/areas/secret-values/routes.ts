import { createHash, X509Certificate } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { CompactEncrypt } from 'jose';
import { problems } from '../../core/openapi.ts';
import { ProblemError } from '../../core/problems.ts';
import { FAILURE_CODES, WORK_KINDS, type WriteSecretPayload } from '../../contract/work.ts';
import {
  AgentParams,
  type AgentWork,
  cancelAgentWork,
  enqueueAgentWork,
  findAgentWork,
  isConnected,
  isPaused,
  requireAgent,
} from '../agents/index.ts';
import { WriteSecretValueQuery, WriteSecretValueRequest, WriteSecretValueResponse } from './schemas.ts';

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

/** E15: a secret value written to the customer's vault by an agent, which alone can decrypt it. */
export async function secretValueRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const db = app.store.db;
  // The request that queued the write waits for its outcome in the store (the work row keeps the report);
  // nothing else moves with a write-secret report.
  app.agentWorkReports.on(WORK_KINDS.writeSecret, async () => {});

  app.post(
    '/secrets/:agentId/secret-value',
    {
      schema: {
        summary: "Write a secret value to the customer's vault through an agent (E15)",
        description:
          "The value is encrypted for the agent's certificate (JWE, RSA-OAEP-256 and A256GCM) and handed to the agent, which " +
          'decrypts it and writes it to its vault. The request waits for the agent to confirm, at most ' +
          'DPC_SECRET_WRITE_TIMEOUT_SECONDS. 409 agent-has-no-certificate / agent-paused / secret-exists; 503 agent-not-connected; ' +
          '502 secret-write-bad-confirmation (the agent said done without resolverRef, or for another vaultSecretName); ' +
          '504 secret-not-written (withdrawn before the agent took it: certainly not written) or secret-write-unconfirmed ' +
          '(the agent took it but did not confirm: it may have been written); 502 secret-write-failed (the agent reported a failure).',
        tags: ['Secrets'],
        params: AgentParams,
        querystring: WriteSecretValueQuery,
        body: WriteSecretValueRequest,
        response: { 200: WriteSecretValueResponse, ...problems(409, 502, 503, 504) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { agentId } = request.params;
      const { secret } = request.body;
      const timeoutSeconds = app.config.secretWriteTimeoutSeconds;
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
      if (!isConnected(agent, app.config.agentConnectedWindowSeconds)) {
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
            overwrite: request.query.overwrite,
            jwe,
          } satisfies WriteSecretPayload,
        }),
      );
      request.auditIds.workId = workId;
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
    },
  );
}
