import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page } from '../../core/paging.ts';
import { pageOf } from '../../core/paging.ts';
import { problems } from '../../core/openapi.ts';
import { runPeriodically } from '../../core/ticker.ts';
import {
  Agent,
  AgentCredentials,
  AgentParams,
  AgentQuery,
  AgentSummary,
  CreateAgentRequest,
  CreateAgentResponse,
  UpdateAgentRequest,
} from './schemas.ts';
import { listAgents } from './repository.ts';
import {
  createAgent,
  deleteAgent,
  issueAgentCredentials,
  readAgentCredentials,
  requireAgent,
  sweepAgentPresence,
  toAgent,
  toSummary,
  updateAgent,
} from './service.ts';

const tags = ['Agents'];

/** The account's view of its agents (E18 and the rest of their management); only admins change them. */
/** A write with If-Match changes the agent only at the version its check saw (core/conditional.ts). */
const rowVersion = { table: 'agents', idParam: 'agentId' };

export async function agentRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const window = app.config.agentConnectedWindowSeconds;
  // Agents whose connected window passed without contact are announced disconnected (agent.disconnected).
  runPeriodically(app, 'agent presence sweep', Math.min(5000, (window * 1000) / 3), () =>
    sweepAgentPresence(app.store.db, window),
  );

  app.get(
    '/agents',
    {
      schema: {
        summary: "List the account's agents with summary details",
        tags,
        querystring: AgentQuery,
        response: { 200: Page(AgentSummary) },
      },
    },
    async (request) => {
      const { rows, total } = await listAgents(app.store.db, request.principal.accountId, request.query);
      return pageOf(
        request.query,
        rows.map((row) => toSummary(row, window)),
        total,
      );
    },
  );

  app.post(
    '/agents',
    {
      config: { role: 'admin' },
      schema: {
        summary: 'Register an agent; issue its credentials next',
        tags,
        body: CreateAgentRequest,
        response: { 201: CreateAgentResponse, ...problems(409, 422) },
      },
    },
    async (request, reply) => {
      const agentId = await app.store.db.transaction().execute(async (trx) => {
        const id = await createAgent(trx, request.principal.accountId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.agentId = id;
        return id;
      });
      return sendCreated(request, reply, { segment: agentId }, { agentId });
    },
  );

  app.get(
    '/agents/:agentId',
    { schema: { summary: 'Read an agent', tags, params: AgentParams, response: { 200: Agent } } },
    async (request) => toAgent(await requireAgent(app.store.db, request.principal.accountId, request.params.agentId), window),
  );

  app.patch(
    '/agents/:agentId',
    {
      config: { role: 'admin', rowVersion },
      schema: {
        summary: 'Update an agent: rename it, describe it, move it, pause or resume it',
        description: 'Answers 202 with the agent as updated, as the real service does (its clients expect 202).',
        tags,
        params: AgentParams,
        body: UpdateAgentRequest,
        response: { 202: Agent, ...problems(409, 422) },
      },
    },
    async (request, reply) => {
      const row = await app.store.db
        .transaction()
        .execute((trx) => updateAgent(trx, request.principal.accountId, request.params.agentId, request.body));
      return reply.code(202).send(toAgent(row, window));
    },
  );

  app.delete(
    '/agents/:agentId',
    {
      config: { role: 'admin', rowVersion },
      schema: {
        summary: 'Delete an agent, its credentials and its pending work',
        description: 'Answers 202 with no body, as the real service does (its clients expect 202); the agent is gone at once.',
        tags,
        params: AgentParams,
        response: { 202: { type: 'null', description: 'The agent is deleted (no body).' }, ...problems(409) },
      },
    },
    async (request, reply) => {
      await app.store.db
        .transaction()
        .execute((trx) => deleteAgent(trx, request.principal.accountId, request.params.agentId, app.agentDeletion));
      // No body at all (not a JSON `null`), as documented.
      return reply.code(202).send(undefined as unknown as null);
    },
  );

  app.get(
    '/agents/:agentId/credentials',
    {
      config: { role: 'admin', audited: true },
      schema: {
        summary: "Read the agent's client credentials (issued on first read; the same until rotated)",
        description:
          'Admins only; every read leaves an audit event and none rotates. The secret is kept sealed with the server key. An agent without credentials gets its first. Credentials issued before secrets were kept sealed cannot be read back (409): issue new ones with POST.',
        tags,
        params: AgentParams,
        response: { 200: AgentCredentials, ...problems(409) },
      },
    },
    async (request, reply) => {
      const credentials = await readAgentCredentials(
        app.store.db,
        app.secretBox,
        request.principal.accountId,
        request.params.agentId,
      );
      return reply.header('cache-control', 'no-store').send(credentials);
    },
  );

  app.post(
    '/agents/:agentId/credentials',
    {
      config: { role: 'admin' },
      schema: {
        summary: "Issue the agent's client credentials (replacing, and so revoking, any earlier ones)",
        description:
          'The secret is kept as a hash and sealed with the server key; GET answers it again until the next rotation. Tokens got with earlier credentials stop working at once.',
        tags,
        params: AgentParams,
        response: { 201: AgentCredentials },
      },
    },
    async (request, reply) => {
      const { accountId } = request.principal;
      const credentials = await issueAgentCredentials(app.store.db, app.secretBox, accountId, request.params.agentId);
      return reply.code(201).header('cache-control', 'no-store').send(credentials);
    },
  );
}
