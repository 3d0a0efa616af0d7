import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { problems } from '../../core/openapi.ts';
import { WORK_KINDS } from '../../contract/work.ts';
import { AgentParams } from '../agents/index.ts';
import { WriteSecretValueQuery, WriteSecretValueRequest, WriteSecretValueResponse } from './schemas.ts';
import { writeSecretValue } from './service.ts';

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
        summary: "Write a secret value to the customer's vault through an agent",
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
      const context = {
        db,
        timeoutSeconds: app.config.secretWriteTimeoutSeconds,
        connectedWindowSeconds: app.config.agentConnectedWindowSeconds,
      };
      const write = {
        accountId,
        agentId: request.params.agentId,
        secret: request.body.secret,
        overwrite: request.query.overwrite,
      };
      return writeSecretValue(context, write, (workId) => {
        request.auditIds.workId = workId;
      });
    },
  );
}
