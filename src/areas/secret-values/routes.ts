import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { CompactEncrypt, importX509 } from 'jose';
import { Type } from 'typebox';
import { problems } from '../../core/openapi.ts';
import { ProblemError, conflict } from '../../core/problems.ts';
import { isConnected, requireAgent, takesWork } from '../agents/repository.ts';
import { cancelAgentWork, enqueueAgentWork, readAgentWork } from '../agents/work.ts';
import { AgentParams } from '../agents/schemas.ts';

/** The kind of agent work that carries a secret to an agent's vault. */
export const WRITE_SECRET = 'write-secret';
/** How secrets travel to agents: JWE, the content key wrapped for the agent's certificate key. */
const JWE_HEADER = { alg: 'RSA-OAEP-256', enc: 'A256GCM', cty: 'application/json' } as const;

const WriteSecretRequest = Type.Object(
  {
    secret: Type.Object(
      {
        name: Type.String({
          minLength: 1,
          maxLength: 255,
          pattern: '^[A-Za-z0-9._/-]+$',
          description: 'name of the vault secret',
        }),
        key: Type.String({ minLength: 1, maxLength: 255, description: 'key within the vault secret' }),
        type: Type.Enum([
          'PASSWORD',
          'OAUTH_CLIENT_CREDENTIALS',
          'OAUTH_USER_TOKENS',
          'COMPOSITE_TOKEN',
          'CLOUD_PLATFORM_CREDENTIALS',
        ]),
        value: Type.Record(Type.String({ minLength: 1, maxLength: 255 }), Type.String({ maxLength: 65536 }), {
          minProperties: 1,
          maxProperties: 50,
          description: 'the secret itself, e.g. {password} or {clientId, clientSecret}; never stored by this server',
        }),
      },
      { additionalProperties: false },
    ),
  },
  {
    additionalProperties: false,
    examples: [
      {
        secret: {
          name: 'salesforce-app',
          key: 'credentials',
          type: 'OAUTH_CLIENT_CREDENTIALS',
          value: { clientId: 'abc', clientSecret: 's3cr3t' },
        },
      },
    ],
  },
);

const WriteSecretQuery = Type.Object({
  overwrite: Type.Boolean({
    default: false,
    description: 'replace a secret of that name and key already in the vault (409 otherwise)',
  }),
});

const WriteSecretAnswer = Type.Object(
  {
    resolver_ref: Type.String({ description: 'how pipelines refer to the secret' }),
    vaultSecretName: Type.String(),
  },
  { examples: [{ resolver_ref: 'MATILLION_CUSTOMER_VAULT:salesforce-app:credentials', vaultSecretName: 'salesforce-app' }] },
);

/**
 * E15: a secret value reaches the customer's vault through their agent and nowhere else. It is encrypted
 * for the agent's certificate here, travels as agent work, and the request waits for the agent to say
 * it is written. The plaintext is never stored, logged or answered; the ciphertext is dropped once the
 * agent has answered, or when the wait ends before the agent took it.
 */
export async function secretValueRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/secrets/:agentId/secret-value',
    {
      schema: {
        summary: "Write a secret value into an agent's vault (E15)",
        description:
          'Answers once the agent confirms. 409: the agent has no certificate, is not running, or the secret exists (without overwrite); ' +
          '503: the agent is not connected; 504: the agent did not confirm in time (the detail says whether it may have written it); ' +
          '502: the agent could not write it.',
        tags: ['Secrets'],
        params: AgentParams,
        querystring: WriteSecretQuery,
        body: WriteSecretRequest,
        response: { 200: WriteSecretAnswer, ...problems(404, 409, 502, 503, 504) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { agentId } = request.params;
      const { secret } = request.body;
      const agent = await requireAgent(app.store.db, accountId, agentId);
      if (agent.certificate === null)
        throw conflict(`Agent ${agentId} has not registered its certificate yet: no secret can be sent to it.`);
      if (!takesWork(agent)) throw conflict(`Agent ${agentId} is ${agent.status}: it takes no work until it is resumed.`);
      if (!isConnected(agent, app.config.agentConnectedSeconds)) {
        throw new ProblemError(
          503,
          `Agent ${agentId} is not connected: it has sent no heartbeat for ${app.config.agentConnectedSeconds} seconds.`,
        );
      }
      const key = await importX509(agent.certificate, JWE_HEADER.alg);
      const jwe = await new CompactEncrypt(new TextEncoder().encode(JSON.stringify(secret)))
        .setProtectedHeader(JWE_HEADER)
        .encrypt(key);
      const workId = await enqueueAgentWork(app.store.db, {
        accountId,
        agentId,
        kind: WRITE_SECRET,
        payload: { jwe, vaultSecretName: secret.name, key: secret.key, overwrite: request.query.overwrite },
      });
      request.auditIds.vaultSecretName = secret.name;
      return awaitConfirmation(app, workId, agentId);
    },
  );
}

/** Waits for the agent's final report on the secret's work, looking at the store (any server process may take the report). */
async function awaitConfirmation(app: FastifyInstance, workId: string, agentId: string) {
  const deadline = Date.now() + app.config.agentSecretTimeoutMs;
  for (;;) {
    const work = await readAgentWork(app.store.db, workId);
    const result = JSON.parse(work?.result ?? '{}') as Record<string, unknown>;
    if (work?.state === 'DONE') {
      return { resolver_ref: String(result.resolverRef), vaultSecretName: String(result.vaultSecretName) };
    }
    if (work?.state === 'FAILED') {
      if (result.code === 'exists')
        throw conflict(`The vault of agent ${agentId} already holds that secret; send overwrite=true to replace it.`);
      throw new ProblemError(502, `Agent ${agentId} could not write the secret: ${String(result.message ?? 'no reason given')}.`);
    }
    if (Date.now() >= deadline) {
      const state = await cancelAgentWork(app.store.db, workId);
      const timeout = app.config.agentSecretTimeoutMs;
      throw new ProblemError(
        504,
        state === 'CANCELLED'
          ? `Agent ${agentId} did not take the secret within ${timeout} ms: it was NOT written, and it will not be.`
          : `Agent ${agentId} took the secret but did not confirm it within ${timeout} ms: it may have been written (work ${workId}).`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
