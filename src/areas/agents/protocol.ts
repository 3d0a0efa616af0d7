import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { authenticate } from '../../core/auth/plugin.ts';
import { problems } from '../../core/openapi.ts';
import { ProblemError } from '../../core/problems.ts';
import { agentOfToken, recordHeartbeat, registerCertificate, statusOf } from './repository.ts';
import { pollAgentWork, renewAgentWork, reportAgentWork } from './work.ts';
import { AGENT_STATUSES } from './schemas.ts';

const tags = ['Agent protocol'];
const WorkId = Type.String({ format: 'uuid' });

const AgentState = {
  agentStatus: Type.Enum(AGENT_STATUSES, { description: 'only a RUNNING agent is handed work' }),
  cancelledWork: Type.Array(WorkId, { description: 'work the agent holds that is to be stopped; it then reports it failed' }),
};

const Work = Type.Object({
  workId: WorkId,
  kind: Type.String({ description: 'what to do: write-secret, start-streaming-pipeline, stop-streaming-pipeline, ...' }),
  payload: Type.Unknown({ description: "the kind's own JSON" }),
  deliveries: Type.Integer({ description: 'how many times this work was handed out; more than 1 means a lease lapsed before' }),
});

/**
 * The operations agents call, under /dpc/agent/v1, with a token issued for an agent's credentials: account
 * tokens do not reach them, and agent tokens reach nothing else. Every call counts as contact (heartbeat).
 */
export async function agentProtocolRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const { agentWorkLeaseSeconds: leaseSeconds, agentPollWaitSeconds, agentConnectedSeconds } = app.config;
  // Long polls end when the server closes, so that a shutdown does not wait for them.
  const closing = new AbortController();
  app.addHook('onClose', async () => closing.abort());

  app.decorateRequest('agent', null as never);
  app.addHook('onRequest', async (request) => {
    const principal = await authenticate(request);
    if (principal.agentId === undefined) {
      throw new ProblemError(403, 'The agent protocol is for agents: sign in with the credentials issued for an agent.');
    }
    const agent = await agentOfToken(app.store.db, principal.agentId, principal.clientId);
    if (!agent)
      throw new ProblemError(
        401,
        'The agent was deleted or its credentials were rotated; sign in again with its current credentials.',
      );
    request.agent = principal;
  });

  app.put(
    '/certificate',
    {
      schema: {
        summary: "Register the agent's X.509 certificate (PEM); secrets are encrypted for its RSA key",
        tags,
        body: Type.Object({ certificate: Type.String({ minLength: 1, maxLength: 65536 }) }, { additionalProperties: false }),
        response: { 200: Type.Object({ fingerprint: Type.String({ description: 'SHA-256 fingerprint of the certificate' }) }) },
      },
    },
    async (request) => {
      const fingerprint = await app.store.db.transaction().execute(async (trx) => {
        await recordHeartbeat(trx, request.agent.agentId);
        return registerCertificate(trx, request.agent.agentId, request.body.certificate);
      });
      return { fingerprint };
    },
  );

  app.post(
    '/heartbeat',
    {
      schema: {
        summary: 'Tell the server the agent is alive and which work it is still doing (their leases run on)',
        tags,
        body: Type.Object({ runningWork: Type.Array(WorkId, { maxItems: 1000, default: [] }) }, { additionalProperties: false }),
        response: {
          200: Type.Object({
            ...AgentState,
            heartbeatSeconds: Type.Integer({ description: 'send the next heartbeat within this many seconds' }),
          }),
        },
      },
    },
    async (request) => {
      const { agentId } = request.agent;
      const cancelledWork = await app.store.db.transaction().execute(async (trx) => {
        await recordHeartbeat(trx, agentId);
        return renewAgentWork(trx, agentId, request.body.runningWork, leaseSeconds);
      });
      return {
        agentStatus: await currentStatus(app, agentId),
        cancelledWork,
        heartbeatSeconds: Math.max(1, Math.floor(agentConnectedSeconds / 3)),
      };
    },
  );

  app.post(
    '/work/poll',
    {
      schema: {
        summary: 'Wait for work (long poll); answers as soon as there is some, or empty after waitSeconds',
        tags,
        body: Type.Object(
          {
            max: Type.Integer({ minimum: 1, maximum: 20, default: 1 }),
            waitSeconds: Type.Integer({ minimum: 0, maximum: 60, default: agentPollWaitSeconds }),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ ...AgentState, work: Type.Array(Work) }) },
      },
    },
    async (request, reply) => {
      const { agentId } = request.agent;
      await recordHeartbeat(app.store.db, agentId);
      const waitMs = Math.min(request.body.waitSeconds, agentPollWaitSeconds) * 1000;
      const gone = AbortSignal.any([closing.signal, abortedWith(reply.raw)]);
      const work =
        (await currentStatus(app, agentId)) === 'RUNNING'
          ? await pollAgentWork(app.store, agentId, { leaseSeconds, max: request.body.max, waitMs, signal: gone })
          : await idle(waitMs, gone);
      return {
        agentStatus: await currentStatus(app, agentId),
        cancelledWork: await renewAgentWork(app.store.db, agentId, [], leaseSeconds),
        work: work.map((piece) => ({
          workId: piece.id,
          kind: piece.kind,
          payload: JSON.parse(piece.payload ?? 'null'),
          deliveries: piece.deliveries,
        })),
      };
    },
  );

  app.post(
    '/work/:workId/reports',
    {
      schema: {
        summary: 'Report progress on a piece of work, or that it is done or failed (the final report is taken once)',
        tags,
        params: Type.Object({ workId: WorkId }),
        body: Type.Object(
          {
            type: Type.Enum(['progress', 'done', 'failed']),
            body: Type.Record(Type.String(), Type.Unknown(), { default: {}, description: "the kind's own report" }),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ workId: WorkId, accepted: Type.Literal(true) }), ...problems(404, 409) },
      },
    },
    async (request) => {
      const { workId } = request.params;
      await app.store.db.transaction().execute(async (trx) => {
        await recordHeartbeat(trx, request.agent.agentId);
        await reportAgentWork(trx, request.agent.agentId, workId, request.body as Parameters<typeof reportAgentWork>[3]);
      });
      return { workId, accepted: true as const };
    },
  );
}

async function currentStatus(app: FastifyInstance, agentId: string) {
  const row = await app.store.db
    .selectFrom('agents')
    .select(['status', 'pausedUntil', 'lastHeartbeatAt'])
    .where('id', '=', agentId)
    .executeTakeFirstOrThrow();
  return statusOf(row);
}

/** A signal that aborts when the connection closes before the answer is sent (the client went away). */
function abortedWith(raw: NodeJS.EventEmitter): AbortSignal {
  const controller = new AbortController();
  raw.once('close', () => controller.abort());
  return controller.signal;
}

/** A paused or stopped agent's poll waits as a poll with no work would, so that it does not spin. */
async function idle(waitMs: number, signal: AbortSignal): Promise<[]> {
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, waitMs);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
  return [];
}
