/**
 * The agent protocol, under /dpc/agent/v1: what an agent process calls with a token got from its own
 * credentials. Account tokens are refused here, as agent tokens are on /dpc/v1. Every message is
 * described in the README ("Agent protocol").
 */
import { X509Certificate } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { bearerTokenOf, invalidTokenProblem } from '../../core/auth/plugin.ts';
import { InvalidToken } from '../../core/auth/tokens.ts';
import { now } from '../../core/db/database.ts';
import { problemResponse } from '../../core/openapi.ts';
import { badRequest, ProblemError } from '../../core/problems.ts';
import { isPaused } from './repository.ts';
import { claimAgentWork, recordAgentWorkReport, renewAgentWork } from './work.ts';

const tags = ['Agent protocol'];
const security = [{ bearerAuth: [] }];
const errors = Object.fromEntries([400, 401, 404, 409, 429, 500].map((status) => [status, problemResponse(status)]));

/** How often a waiting poll looks for work in the store (shared by every server instance). */
const POLL_INTERVAL_MS = 250;
/** How often a waiting poll counts as contact, at most (and at least three times per connected window). */
const CONTACT_EVERY_MS = 5000;
/** Long polls one agent may have waiting at once on one server process; more are refused (429). */
export const MAX_POLLS_PER_AGENT = 4;
/** Smallest RSA key an agent certificate may carry. */
const MIN_RSA_BITS = 2048;

const CertificateRequest = Type.Object(
  { certificate: Type.String({ minLength: 1, maxLength: 16_384, description: 'X.509 certificate, PEM' }) },
  { examples: [{ certificate: '-----BEGIN CERTIFICATE-----\nMIIC...\n-----END CERTIFICATE-----\n' }] },
);
const HeartbeatRequest = Type.Object(
  {
    heldWorkIds: Type.Optional(
      Type.Array(Type.String({ format: 'uuid' }), { maxItems: 100, description: 'work the agent is still doing' }),
    ),
  },
  { examples: [{ heldWorkIds: ['3b0c8a2e-4a1f-4bb0-8e1e-8d2a7f2c9d10'] }] },
);
const HeartbeatAnswer = Type.Object({
  agentId: Type.String(),
  agentStatus: Type.String(),
  heartbeatIntervalSeconds: Type.Integer({ description: 'send the next heartbeat within this' }),
  connectedWindowSeconds: Type.Integer(),
  cancelledWorkIds: Type.Array(Type.String(), { description: 'of heldWorkIds, those cancelled: stop them' }),
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
});
const ReportRequest = Type.Object(
  {
    type: Type.Enum(['progress', 'done', 'failed']),
    body: Type.Optional(
      Type.Unknown({ description: 'what the work produced (done), why it failed (failed), how far it got (progress)' }),
    ),
  },
  { examples: [{ type: 'done', body: { vaultSecretName: 'warehouse' } }] },
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
  const agent = await app.store.db
    .selectFrom('agents')
    .select('id')
    .where('id', '=', principal.agentId)
    .where('accountId', '=', principal.accountId)
    .where('clientId', '=', principal.clientId)
    .executeTakeFirst();
  if (!agent) {
    throw invalidTokenProblem(new InvalidToken('the agent was deleted or its credentials were replaced'));
  }
  return principal;
}

/** Checks an agent's certificate: PEM X.509, an RSA key of at least 2048 bits, valid now. */
function parseCertificate(pem: string): X509Certificate {
  let certificate: X509Certificate;
  try {
    certificate = new X509Certificate(pem);
  } catch {
    throw badRequest('The certificate is not a PEM X.509 certificate.', ['body.certificate: is not a PEM X.509 certificate']);
  }
  const key = certificate.publicKey;
  if (key.asymmetricKeyType !== 'rsa' || (key.asymmetricKeyDetails?.modulusLength ?? 0) < MIN_RSA_BITS) {
    throw badRequest('The certificate must carry an RSA public key of at least 2048 bits.', [
      `body.certificate: the public key is ${key.asymmetricKeyType}, not RSA of ${MIN_RSA_BITS} bits or more`,
    ]);
  }
  const at = Date.now();
  if (Date.parse(certificate.validFrom) > at || Date.parse(certificate.validTo) <= at) {
    throw badRequest('The certificate is not valid now.', [
      `body.certificate: valid from ${certificate.validFrom} to ${certificate.validTo}`,
    ]);
  }
  return certificate;
}

export async function agentProtocolRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const { agentConnectedWindowSeconds: window, agentWorkLeaseSeconds, agentPollMaxWaitSeconds } = app.config;
  const leaseMs = agentWorkLeaseSeconds * 1000;
  const contactEveryMs = Math.min(CONTACT_EVERY_MS, (window * 1000) / 3);
  const db = app.store.db;
  /** Long polls waiting per agent on this process (MAX_POLLS_PER_AGENT at most). */
  const pollsWaiting = new Map<string, number>();

  app.decorateRequest('agent', null as never);
  app.addHook('onRequest', async (request) => {
    request.agent = await authenticateAgent(app, bearerTokenOf(request));
  });

  /** Records contact: the agent is connected from now for the window, and RUNNING unless it is paused. */
  const touch = (agentId: string) =>
    db
      .updateTable('agents')
      .set((eb) => ({
        lastContactAt: now(),
        status: eb.case().when('status', 'in', ['PENDING', 'STOPPED']).then('RUNNING').else(eb.ref('status')).end(),
      }))
      .where('id', '=', agentId)
      .execute();

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
      const certificate = parseCertificate(request.body.certificate);
      await db
        .updateTable('agents')
        .set({ certificatePem: certificate.toString() })
        .where('id', '=', request.agent.agentId)
        .execute();
      return { fingerprint256: certificate.fingerprint256, notAfter: new Date(certificate.validTo).toISOString() };
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
      const { agentId } = request.agent;
      await touch(agentId);
      const cancelledWorkIds = await renewAgentWork(db, agentId, request.body.heldWorkIds ?? [], leaseMs);
      const row = await db
        .selectFrom('agents')
        .select(['status', 'pausedUntil'])
        .where('id', '=', agentId)
        .executeTakeFirstOrThrow();
      return {
        agentId,
        agentStatus: isPaused(row) ? 'PAUSED' : row.status,
        heartbeatIntervalSeconds: Math.max(1, Math.floor(window / 3)),
        connectedWindowSeconds: window,
        cancelledWorkIds,
      };
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
      const { agentId } = request.agent;
      const waiting = pollsWaiting.get(agentId) ?? 0;
      if (waiting >= MAX_POLLS_PER_AGENT) {
        throw new ProblemError(
          429,
          `This agent already has ${MAX_POLLS_PER_AGENT} polls waiting on this server; poll again when one of them answers.`,
          { name: 'too-many-polls', headers: { 'retry-after': '1' } },
        );
      }
      pollsWaiting.set(agentId, waiting + 1);
      try {
        return await poll(agentId, request, reply);
      } finally {
        const left = (pollsWaiting.get(agentId) ?? 1) - 1;
        if (left > 0) pollsWaiting.set(agentId, left);
        else pollsWaiting.delete(agentId);
      }
    },
  );

  async function poll(
    agentId: string,
    request: { query: { waitSeconds: number }; raw: { socket: { destroyed: boolean } } },
    reply: FastifyReply,
  ) {
    const deadline = Date.now() + Math.min(request.query.waitSeconds, agentPollMaxWaitSeconds) * 1000;
    let contactAt = 0;
    for (;;) {
      if (Date.now() - contactAt >= contactEveryMs) {
        await touch(agentId);
        contactAt = Date.now();
      }
      const agent = await db.selectFrom('agents').select('pausedUntil').where('id', '=', agentId).executeTakeFirstOrThrow();
      const work = isPaused(agent) ? undefined : await claimAgentWork(db, app.store.dialect, agentId, leaseMs);
      if (work) {
        return {
          workId: work.id,
          kind: work.kind,
          payload: work.payload,
          delivery: work.deliveries,
          leaseExpiresAt: new Date(Date.now() + leaseMs).toISOString(),
        };
      }
      const left = deadline - Date.now();
      if (left <= 0 || app.shuttingDown || request.raw.socket.destroyed) return reply.code(204).send(null);
      await sleep(Math.min(POLL_INTERVAL_MS, left));
    }
  }

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
      const report = { type: request.body.type, body: request.body.body ?? null };
      const work = await recordAgentWorkReport(
        db,
        request.agent.agentId,
        request.params.workId,
        report,
        leaseMs,
        app.agentWorkReports,
      );
      return { workId: work.id, state: work.state };
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
      await db
        .updateTable('agents')
        .set({ status: 'STOPPED', lastContactAt: null })
        .where('id', '=', request.agent.agentId)
        .execute();
      return reply.code(204).send(null);
    },
  );
}
