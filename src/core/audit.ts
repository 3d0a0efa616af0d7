import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { now, type Executor } from './db/database.ts';
import { preparedQuery } from './db/prepared.ts';
import type { AuditEventTable } from './db/schema.ts';
import { emitMany, writeEventType, type NewEvent } from './outbox.ts';

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
  private waiting: { event: AuditEvent; announced?: NewEvent; done: (failure: unknown) => void }[] = [];
  constructor(private readonly db: Executor) {}

  /**
   * Stores the event with the others of this turn, and `announced` in the outbox in the same transaction;
   * answers the failure, if storing failed.
   */
  record(event: AuditEvent, announced?: NewEvent): Promise<unknown> {
    if (this.waiting.length === 0) setImmediate(() => void this.flush());
    return new Promise((done) => this.waiting.push({ event, announced, done }));
  }

  private async flush(): Promise<void> {
    const batch = this.waiting.splice(0, MOST_ROWS);
    if (this.waiting.length > 0) setImmediate(() => void this.flush());
    let failure: unknown;
    try {
      // One event alone (a quiet server) takes the statement compiled once.
      const events = batch.map(({ event }) => event);
      const announced = batch.flatMap(({ announced }) => (announced ? [announced] : []));
      const insert = (db: Executor) =>
        events.length === 1 ? insertAuditEvent(db, events[0]) : db.insertInto('auditEvents').values(events).execute();
      // The trail and the outbox agree: both rows land or neither does.
      await (announced.length === 0
        ? insert(this.db)
        : this.db.transaction().execute(async (trx) => {
            await insert(trx);
            await emitMany(trx, announced);
          }));
    } catch (error) {
      failure = error;
    }
    for (const { done } of batch) done(failure);
  }
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
  const trail = new AuditBatches(app.store.db);
  // Before the answer leaves, so that a client that saw its write succeed finds it in the trail.
  const recordWrite = async (request: FastifyRequest, reply: FastifyReply) => {
    const audited = WRITES.has(request.method) || request.routeOptions.config.audited === true;
    // A replayed answer (Idempotency-Key) did nothing: the first request was recorded.
    if (!audited || reply.statusCode >= 400 || !request.principal || request.idempotentReplay) return;
    const ids: Record<string, string> = { ...(request.params as Record<string, string>), ...request.auditIds };
    const route = request.routeOptions.url ?? request.url;
    const path = request.url.split('?')[0];
    const type = writeEventType(request.method, route);
    const failure = await trail.record(
      {
        accountId: request.principal.accountId,
        clientId: request.principal.clientId,
        method: request.method,
        route,
        path,
        status: reply.statusCode,
        projectId: ids.projectId ?? null,
        resourceIds: JSON.stringify(ids),
        occurredAt: now(),
      },
      type === undefined
        ? undefined
        : {
            accountId: request.principal.accountId,
            type,
            projectId: ids.projectId ?? null,
            subject: path.replace(/^\/dpc\/v1\//, ''),
            data: {
              method: request.method,
              route,
              status: reply.statusCode,
              resourceIds: ids,
              clientId: request.principal.clientId,
            },
          },
    );
    if (failure) request.log.error({ err: failure }, 'audit event not recorded');
  };
  // Hooked onto write routes (and reads marked `audited`) only: a read pays nothing for the trail.
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (!(methods.some((method) => WRITES.has(method)) || route.config?.audited) || route.config?.readOnly) return;
    route.onRequest = [startAuditIds, ...[route.onRequest ?? []].flat()];
    route.onSend = [recordWrite, ...[route.onSend ?? []].flat()];
  });
});
