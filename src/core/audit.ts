import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { now, type Executor } from './db/database.ts';
import { preparedQuery } from './db/prepared.ts';
import type { AuditEventTable } from './db/schema.ts';
import { writeContext, type PendingWriteEvent } from './db/deferred-events.ts';
import { emit, writeEventType } from './outbox.ts';

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

type AuditEvent = Omit<AuditEventTable, 'id'>;

// Every write runs it: compiled once.
const insertAuditEvent = preparedQuery((db, event: AuditEvent) =>
  db.insertInto('auditEvents').values({
    accountId: event.accountId,
    clientId: event.clientId,
    method: event.method,
    route: event.route,
    path: event.path,
    status: event.status,
    projectId: event.projectId,
    resourceIds: event.resourceIds,
    occurredAt: event.occurredAt,
  }),
);

/** The most rows one insert carries (SQLite binds at most 32,766 values; an event is 9). */
const MOST_ROWS = 500;

/**
 * The events of writes answered in the same turn of the event loop, inserted by one statement: one
 * commit for many under load, where each was a commit of its own (on SQLite about a third of a
 * create's store time). Each request still waits for its own event to be stored before it answers.
 */
class AuditBatches {
  private waiting: { event: AuditEvent; done: (failure: unknown) => void }[] = [];
  constructor(private readonly db: Executor) {}

  /** Stores the event with the others of this turn; answers the failure, if storing failed. */
  record(event: AuditEvent): Promise<unknown> {
    // Scheduled outside the write it records: nothing of this write's runs in the batch.
    if (this.waiting.length === 0) writeContext.exit(() => setImmediate(() => void this.flush()));
    return new Promise((done) => this.waiting.push({ event, done }));
  }

  private async flush(): Promise<void> {
    const batch = this.waiting.splice(0, MOST_ROWS);
    if (this.waiting.length > 0) setImmediate(() => void this.flush());
    let failure: unknown;
    try {
      // One event alone (a quiet server) takes the statement compiled once.
      const events = batch.map(({ event }) => event);
      await (events.length === 1
        ? insertAuditEvent(this.db, events[0])
        : this.db.insertInto('auditEvents').values(events).execute());
    } catch (error) {
      failure = error;
    }
    for (const { done } of batch) done(failure);
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The outbox event of this audited write, waiting for its transaction (db/deferred-events.ts). */
    writeEvent: PendingWriteEvent | null;
  }
}

/** The outbox event of an audited write, as it stands now (the handler may name more ids as it goes). */
function writeEventOf(request: FastifyRequest, type: string) {
  const ids: Record<string, string> = { ...(request.params as Record<string, string>), ...request.auditIds };
  const route = request.routeOptions.url ?? request.url;
  const path = request.url.split('?')[0];
  return {
    accountId: request.principal.accountId,
    type,
    projectId: ids.projectId ?? null,
    subject: path.replace(/^\/dpc\/v1\//, ''),
    data: JSON.stringify({ method: request.method, route, resourceIds: ids, clientId: request.principal.clientId }),
    occurredAt: now(),
  };
}

/**
 * Records every successful write of the scope it is registered in (and every read marked `audited`): who, what, when and the outcome.
 * Only the route, the path parameters and ids a handler names are kept, never a body, so secret
 * values cannot reach the trail.
 */
export const auditPlugin = fp(async (app: FastifyInstance) => {
  app.decorateRequest('auditIds', null as unknown as Record<string, string>);
  const startAuditIds = async (request: FastifyRequest) => {
    request.auditIds = {};
  };
  app.decorateRequest('writeEvent', null);
  const trail = new AuditBatches(app.store.db);
  // Before the answer leaves, so that a client that saw its write succeed finds it in the trail.
  const recordWrite = async (request: FastifyRequest, reply: FastifyReply) => {
    const pending = request.writeEvent;
    if (pending) pending.closed = true;
    const audited = WRITES.has(request.method) || request.routeOptions.config.audited === true;
    // A replayed answer (Idempotency-Key) did nothing: the first request was recorded.
    if (!audited || reply.statusCode >= 400 || !request.principal || request.idempotentReplay) return;
    const ids: Record<string, string> = { ...(request.params as Record<string, string>), ...request.auditIds };
    const route = request.routeOptions.url ?? request.url;
    const recorded = trail.record({
      accountId: request.principal.accountId,
      clientId: request.principal.clientId,
      method: request.method,
      route,
      path: request.url.split('?')[0],
      status: reply.statusCode,
      projectId: ids.projectId ?? null,
      resourceIds: JSON.stringify(ids),
      occurredAt: now(),
    });
    // The write's event went with its transaction; a write that changed nothing in one (a single statement,
    // or nothing at all) is announced now, in a transaction of its own.
    const announced =
      pending && !pending.written
        ? emit(app.store.db, { ...pending.event(), data: JSON.parse(pending.event().data) as Record<string, unknown> }).then(
            () => undefined,
            (error: unknown) => error,
          )
        : undefined;
    const [failure, unannounced] = await Promise.all([recorded, announced]);
    if (failure) request.log.error({ err: failure }, 'audit event not recorded');
    if (unannounced) request.log.error({ err: unannounced }, 'outbox event of a write not recorded');
  };
  // Hooked onto write routes (and reads marked `audited`) only: a read pays nothing for the trail.
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (!(methods.some((method) => WRITES.has(method)) || route.config?.audited) || route.config?.readOnly) return;
    route.onRequest = [startAuditIds, ...[route.onRequest ?? []].flat()];
    route.onSend = [recordWrite, ...[route.onSend ?? []].flat()];
    // The handler runs with its write's pending event: the first of its transactions that changes something
    // writes the event with its commit (db/deferred-events.ts).
    const type = writeEventType(methods[0], route.url);
    if (type === undefined) return;
    const handler = route.handler;
    route.handler = function (this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) {
      if (!request.principal) return handler.call(this, request, reply);
      const pending: PendingWriteEvent = {
        event: () => writeEventOf(request, type),
        written: false,
        committing: false,
        closed: false,
      };
      request.writeEvent = pending;
      return writeContext.run(pending, () => handler.call(this, request, reply));
    };
  });
});
