import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Page } from '../../core/paging.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { sendCreated } from '../../core/created.ts';
import {
  Agent,
  AgentCredentials,
  AgentListQuery,
  AgentParams,
  AgentSummary,
  CreateAgentRequest,
  CreateAgentResponse,
  UpdateAgentRequest,
} from './schemas.ts';
import { createAgent, deleteAgent, issueAgentCredentials, listAgents, requireAgent, toAgent, updateAgent } from './repository.ts';

const tags = ['Agents'];
const admin = { role: 'admin' as const };

/** The account's agents (E18): admins register and manage them, everyone reads them. */
export async function agentRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const connectedSeconds = app.config.agentConnectedSeconds;

  app.get(
    '/agents',
    {
      schema: {
        summary: 'List the agents of the account, by name (E18)',
        tags,
        querystring: AgentListQuery,
        response: { 200: Page(AgentSummary), ...problems(404) },
      },
    },
    async (request) => listAgents(app.store.db, request.principal.accountId, request.query, connectedSeconds),
  );

  app.post(
    '/agents',
    {
      config: admin,
      schema: {
        summary: 'Register an agent',
        tags,
        body: CreateAgentRequest,
        response: { 201: CreateAgentResponse, ...problems(409) },
      },
    },
    async (request, reply) => {
      const agentId = await app.store.db
        .transaction()
        .execute((trx) => createAgent(trx, request.principal.accountId, request.body));
      request.auditIds.agentId = agentId;
      return sendCreated(request, reply, { segment: agentId }, { agentId });
    },
  );

  app.get(
    '/agents/:agentId',
    { schema: { summary: 'Get an agent', tags, params: AgentParams, response: { 200: Agent } } },
    async (request) =>
      toAgent(await requireAgent(app.store.db, request.principal.accountId, request.params.agentId), connectedSeconds),
  );

  app.patch(
    '/agents/:agentId',
    {
      config: admin,
      schema: {
        summary: 'Rename, describe, pause, stop or resume an agent',
        description:
          'agentStatus PAUSED (with an optional pausedUntil), STOPPED or RUNNING (resume). A paused or stopped agent is handed no work.',
        tags,
        params: AgentParams,
        body: UpdateAgentRequest,
        response: { 200: Agent, ...problems(409) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { agentId } = request.params;
      return app.store.db.transaction().execute(async (trx) => {
        await updateAgent(trx, accountId, agentId, request.body);
        return toAgent(await requireAgent(trx, accountId, agentId), connectedSeconds);
      });
    },
  );

  app.delete(
    '/agents/:agentId',
    {
      config: admin,
      schema: {
        summary: 'Delete an agent; its credentials stop working and its pending work is dropped',
        tags,
        params: AgentParams,
        response: { ...noContent('The agent is deleted.'), ...problems(409) },
      },
    },
    async (request, reply) => {
      await app.store.db.transaction().execute((trx) => deleteAgent(trx, request.principal.accountId, request.params.agentId));
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/agents/:agentId/credentials',
    {
      config: admin,
      schema: {
        summary: "Issue the agent's credentials; issuing again rotates them (the old ones stop working at once)",
        tags,
        params: AgentParams,
        response: { 200: AgentCredentials },
      },
    },
    async (request, reply) => {
      const credentials = await app.store.db
        .transaction()
        .execute((trx) => issueAgentCredentials(trx, request.principal.accountId, request.params.agentId));
      return reply.header('cache-control', 'no-store').send(credentials);
    },
  );
}
