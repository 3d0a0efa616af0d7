/**
 * The agent protocol, under /dpc/agent/v1: what an agent process calls with a token got from its own
 * credentials. Account tokens are refused here, as agent tokens are on /dpc/v1. Every message is
 * described in the README ("Agent protocol").
 */
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { bearerTokenOf, failedAuthenticationCounter, invalidTokenProblem } from '../../core/auth/plugin.ts';
import { ProblemError } from '../../core/problems.ts';
import { InvalidToken } from '../../core/auth/tokens.ts';
import { problemResponse } from '../../core/openapi.ts';
import { agentGoneProblem, AgentProtocol } from './protocol-service.ts';
import { AGENT_WORK_CHANNEL, queuedWork } from './work.ts';
import { ChannelWakeups } from '../../core/outbox-wakeups.ts';
import { findAgentOfClient } from './repository.ts';

const tags = ['Agent protocol'];
const security = [{ bearerAuth: [] }];
const errors = Object.fromEntries([400, 401, 404, 409, 429, 500].map((status) => [status, problemResponse(status)]));

const CertificateRequest = Type.Object(
  { certificate: Type.String({ minLength: 1, maxLength: 16_384, description: 'X.509 certificate, PEM' }) },
  { examples: [{ certificate: '-----BEGIN CERTIFICATE-----\nMIIC...\n-----END CERTIFICATE-----\n' }] },
);
const HeartbeatRequest = Type.Object(
  {
    heldWorkIds: Type.Optional(
      Type.Array(Type.String({ format: 'uuid' }), { maxItems: 100, description: 'work the agent is still doing' }),
    ),
    heldWork: Type.Optional(
      Type.Array(
        Type.Object(
          { workId: Type.String({ format: 'uuid' }), delivery: Type.Integer({ minimum: 1, maximum: 2_147_483_647 }) },
          { additionalProperties: false },
        ),
        {
          maxItems: 100,
          description:
            'work the agent is still doing, with the delivery it runs: only the current delivery is renewed, and a stale one is named in endedWork',
        },
      ),
    ),
  },
  { examples: [{ heldWork: [{ workId: '3b0c8a2e-4a1f-4bb0-8e1e-8d2a7f2c9d10', delivery: 1 }] }] },
);
const HeartbeatAnswer = Type.Object({
  agentId: Type.String(),
  agentStatus: Type.String(),
  heartbeatIntervalSeconds: Type.Integer({ description: 'send the next heartbeat within this' }),
  connectedWindowSeconds: Type.Integer(),
  cancelledWorkIds: Type.Array(Type.String(), { description: 'of the held work, those cancelled: stop them' }),
  endedWork: Type.Array(
    Type.Object({
      workId: Type.String(),
      delivery: Type.Union([Type.Integer(), Type.Null()], { description: 'as held (null: named in heldWorkIds)' }),
      reason: Type.Enum(['cancelled', 'finished', 'redelivered', 'unknown']),
    }),
    {
      description:
        "of the held work, each delivery that is no longer the agent's to run: cancelled, finished, delivered again since (its lease lapsed) or unknown. Stop it at once; report nothing more on it but, if cancelled, its final report",
    },
  ),
});
const PollQuery = Type.Object({
  waitSeconds: Type.Integer({ minimum: 0, maximum: 300, default: 20, description: 'longest wait (capped by the server)' }),
});
const WorkItem = Type.Object({
  workId: Type.String(),
  kind: Type.String(),
  payload: Type.Unknown(),
  delivery: Type.Integer({ description: '1 on the first delivery, more on a redelivery after a lapsed lease' }),
  leaseExpiresAt: Type.String({ format: 'date-time' }),
  leaseSeconds: Type.Integer({
    description: 'how long a lease lasts: renewed by each heartbeat naming the work and each progress report',
  }),
});
/**
 * A pipeline run's step, as its progress reports carry it (`body.step`): typed here, at the entrance, so that
 * what is stored and served (the run's steps, their events and lineage) is what the API promises.
 */
const ReportedStep = Type.Object(
  {
    index: Type.Integer({ minimum: 0, maximum: 2_147_483_647, description: 'position in the run, from 0' }),
    name: Type.String({ maxLength: 4000 }),
    status: Type.Enum(['RUNNING', 'SUCCESS', 'FAILED', 'SKIPPED', 'CANCELLED']),
    startedAt: Type.String({ format: 'date-time' }),
    finishedAt: Type.Optional(Type.String({ format: 'date-time' })),
    message: Type.Optional(Type.String({ maxLength: 65_535 })),
    childPipeline: Type.Optional(Type.String({ maxLength: 4000, description: 'the pipeline file the step belongs to' })),
    parentStep: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 2_147_483_647,
        description: "a child pipeline's step: the index of the step that runs that pipeline (an earlier step)",
      }),
    ),
    runsPipeline: Type.Optional(
      Type.String({ maxLength: 4000, description: 'a step that runs a child pipeline: that pipeline file' }),
    ),
    rowsWritten: Type.Optional(Type.Unknown({ description: 'rows its SQL wrote: a whole number, 0 or more' })),
    lineage: Type.Optional(Type.Unknown({ description: 'the datasets it read and wrote' })),
  },
  { description: "a pipeline run's step (a run's progress reports)" },
);

const ReportRequest = Type.Object(
  {
    type: Type.Enum(['progress', 'done', 'failed']),
    body: Type.Optional(
      // Any JSON value; when it is an object with a `step`, that step is checked (a schema of properties with no type).
      Type.Unsafe<unknown>({
        description: 'what the work produced (done), why it failed (failed), how far it got (progress)',
        properties: {
          step: ReportedStep,
          failedPipelines: Type.Array(Type.String(), {
            description:
              'failed, execute-tests: the test pipelines that failed (code pipeline-failed), each of the payload tests, once; the others passed',
          }),
        },
        additionalProperties: true,
      }),
    ),
    delivery: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 2_147_483_647,
        description:
          "the poll answer's delivery: a report of an earlier delivery than the work's latest is 409 work-redelivered, of a later one 409 work-delivery-unknown",
      }),
    ),
    sequence: Type.Optional(
      Type.Integer({
        minimum: 1,
        description:
          'counts the reports of one delivery from 1; a report at or below the highest recorded is a repeat, answered as recorded and not applied again',
      }),
    ),
  },
  { examples: [{ type: 'done', body: { vaultSecretName: 'warehouse' }, delivery: 1, sequence: 7 }] },
);

/** The agent of the bearer token, once its token is valid and its credentials are still the current ones. */
async function authenticateAgent(app: FastifyInstance, token: string) {
  let principal;
  try {
    principal = await app.tokens.verifyAgent(token);
  } catch (error) {
    if (error instanceof InvalidToken) throw invalidTokenProblem(error);
    throw error;
  }
  const agent = await findAgentOfClient(app.store.db, principal.accountId, principal.agentId, principal.clientId);
  if (!agent) throw agentGoneProblem();
  return principal;
}

export async function agentProtocolRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  // Work queued for an agent wakes its waiting polls on this process (NOTIFY on PostgreSQL, whichever process queued it).
  const wakeups = new ChannelWakeups(app.config.databaseUrl, app.log, AGENT_WORK_CHANNEL, queuedWork);
  const protocol = new AgentProtocol(
    app.store.db,
    app.store.dialect,
    {
      connectedWindowSeconds: app.config.agentConnectedWindowSeconds,
      leaseMs: app.config.agentWorkLeaseSeconds * 1000,
      pollMaxWaitSeconds: app.config.agentPollMaxWaitSeconds,
    },
    app.agentWorkReports,
    () => app.shuttingDown,
    wakeups,
  );
  app.addHook('onClose', async () => {
    protocol.close();
    await wakeups.close();
  });

  app.decorateRequest('agent', null as never);
  // A failed authentication counts against its address's rate limit, as on the API: agent tokens are no
  // easier to guess than API tokens.
  const countFailure = failedAuthenticationCounter(app);
  app.addHook('onRequest', async (request, reply) => {
    try {
      request.agent = await authenticateAgent(app, bearerTokenOf(request));
    } catch (error) {
      if (countFailure && error instanceof ProblemError && error.status === 401) await countFailure(request, reply);
      throw error;
    }
  });

  app.put(
    '/certificate',
    {
      schema: {
        summary: "Register the agent's X.509 certificate (its private key stays with the agent)",
        tags,
        security,
        body: CertificateRequest,
        response: {
          200: Type.Object({ fingerprint256: Type.String(), notAfter: Type.String({ format: 'date-time' }) }),
          ...errors,
        },
      },
    },
    async (request) => {
      return protocol.registerCertificate(request.agent.agentId, request.body.certificate);
    },
  );

  app.post(
    '/heartbeat',
    {
      schema: {
        summary: 'Say the agent is alive; renew the leases of the work it holds and learn which was cancelled',
        tags,
        security,
        body: HeartbeatRequest,
        response: { 200: HeartbeatAnswer, ...errors },
      },
    },
    async (request) => {
      return protocol.heartbeat(request.agent.agentId, request.body.heldWorkIds ?? [], request.body.heldWork ?? []);
    },
  );

  app.get(
    '/work',
    {
      schema: {
        summary: 'Long-poll for the next piece of work (204 when none came within the wait)',
        tags,
        security,
        querystring: PollQuery,
        response: { 200: WorkItem, 204: { type: 'null', description: 'no work within the wait' }, ...errors },
      },
    },
    async (request, reply) => {
      const work = await protocol.poll(request.agent.agentId, request.query.waitSeconds, () => request.raw.socket.destroyed);
      return work ?? reply.code(204).send(null);
    },
  );

  app.post(
    '/work/:workId/reports',
    {
      schema: {
        summary: 'Report progress on a piece of work, or that it is done or failed (a final report is taken once)',
        tags,
        security,
        params: Type.Object({ workId: Type.String({ format: 'uuid' }) }),
        body: ReportRequest,
        response: { 200: Type.Object({ workId: Type.String(), state: Type.String() }), ...errors },
      },
    },
    async (request) => {
      const { type, body, delivery, sequence } = request.body;
      return protocol.report(request.agent.agentId, request.params.workId, {
        type,
        body: body ?? null,
        ...(delivery !== undefined && { delivery }),
        ...(sequence !== undefined && { sequence }),
      });
    },
  );

  app.post(
    '/disconnect',
    {
      schema: {
        summary: 'Sign off: the agent is STOPPED and not connected until its next heartbeat',
        tags,
        security,
        response: { 204: { type: 'null', description: 'signed off' }, ...errors },
      },
    },
    async (request, reply) => {
      await protocol.signOff(request.agent.agentId);
      return reply.code(204).send(null);
    },
  );
}
