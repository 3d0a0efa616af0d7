import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { problems } from '../../core/openapi.ts';
import { badRequest } from '../../core/problems.ts';
import { bearerTokenOf } from '../../core/auth/plugin.ts';
import { committedAfter, lastEventId, pruneEvents } from '../../core/outbox.ts';
import { runPeriodically } from '../../core/ticker.ts';
import { FeedHub } from './hub.ts';
import { EventStreamHeaders, EventStreamQuery } from './schemas.ts';

const HOUR_MS = 3_600_000;

/** Types as the query gives them: comma-separated, blanks dropped. */
export function parseTypes(raw: string | undefined): string[] | undefined {
  const types = (raw ?? '')
    .split(',')
    .map((type) => type.trim())
    .filter(Boolean);
  return types.length > 0 ? types : undefined;
}

/** The resumable event feed (Server-Sent Events) of the outbox, and the outbox's retention. */
export async function eventFeedRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const hub = new FeedHub(app.store.db, app.outboxWakeups, {
    pollMs: app.config.eventsPollMs,
    heartbeatMs: app.config.eventsHeartbeatSeconds * 1000,
    log: app.log,
    stillValid: (clientId, expiresAt) => app.tokens.stillValid(clientId, expiresAt),
    streamsPerClient: app.config.eventsStreamsPerClient,
  });
  // Open streams would hold the server's close up: they end first, and their clients resume elsewhere.
  app.addHook('preClose', async () => hub.close());

  runPeriodically(app, 'event retention', HOUR_MS, () =>
    pruneEvents(app.store.db, new Date(Date.now() - app.config.eventsRetentionDays * 24 * HOUR_MS).toISOString()),
  );

  app.get(
    '/events/stream',
    {
      schema: {
        summary: "Follow the account's events (Server-Sent Events)",
        description:
          "A `text/event-stream` of the account's events, oldest first, each with its id (`id:`), type (`event:`) and " +
          'JSON (`data:`, a StreamedEvent). Without Last-Event-ID it starts with the next event; with it, after that ' +
          'event, on any server instance: nothing is lost or repeated. Events are kept DPC_EVENTS_RETENTION_DAYS ' +
          '(30) days. A comment line every DPC_EVENTS_HEARTBEAT_SECONDS keeps idle connections open. An API client may hold ' +
          'DPC_EVENTS_STREAMS_PER_CLIENT (20) streams open on one server process; more are 429. See docs/events.md.',
        tags: ['Events'],
        querystring: EventStreamQuery,
        headers: EventStreamHeaders,
        response: {
          200: {
            description: 'The stream; it stays open until the client or the server closes it.',
            content: { 'text/event-stream': { schema: Type.String() } },
          },
          ...problems(429),
        },
      },
    },
    async (request, reply) => {
      const { accountId } = request.principal;
      // The stream ends when the access it was opened with does (the client revoked, the token expired).
      const expiresAt = app.tokens.expiryOf(bearerTokenOf(request));
      const head = await lastEventId(app.store.db, accountId);
      const resume = request.headers['last-event-id'] ?? request.query.lastEventId;
      const cursor = resume === undefined ? head : Number(resume);
      if (cursor > head) {
        throw badRequest(`Event ${cursor} has not happened yet; the last event so far is ${head}.`, [
          "Last-Event-ID: must be an id this account's stream has sent",
        ]);
      }
      // Starting "now": events past the safe point that committed already (PostgreSQL commits ids out of
      // order) happened before the client subscribed, and are not sent.
      const before = resume === undefined ? await committedAfter(app.store.db, accountId, head) : undefined;
      hub.admit(request.principal.clientId); // 429 past DPC_EVENTS_STREAMS_PER_CLIENT; counted until subscribe()'s socket closes
      reply.hijack();
      // A stream holds its connection for hours, thousands at once, so it is written straight to the socket:
      // no chunked framing, no ServerResponse header block kept for the connection's life, and nothing of the
      // request it no longer needs (its headers, the bearer token most of them, were read). The answer is
      // delimited by the connection's close, as HTTP/1.1 allows for an answer without a length.
      const socket = request.raw.socket;
      request.raw.rawHeaders = [];
      request.raw.headers = {};
      // Sent with the head, so that a client knows it is subscribed before the first event.
      socket.write(
        'HTTP/1.1 200 OK\r\n' +
          'content-type: text/event-stream; charset=utf-8\r\n' +
          'cache-control: no-cache, no-transform\r\n' +
          'connection: close\r\n' +
          'x-accel-buffering: no\r\n' +
          `x-request-id: ${request.id}\r\n\r\n` +
          `: subscribed after event ${cursor}\nretry: 2000\n\n`,
      );
      hub.subscribe(
        accountId,
        socket,
        { clientId: request.principal.clientId, expiresAt },
        { types: parseTypes(request.query.type), projectId: request.query.projectId },
        cursor,
        head,
        before,
      );
    },
  );
}
