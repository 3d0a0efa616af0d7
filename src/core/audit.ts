import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { now } from './db/database.ts';
import { preparedQuery } from './db/prepared.ts';
import type { AuditEventTable } from './db/schema.ts';

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

// Every write runs it: compiled once.
const insertAuditEvent = preparedQuery((db, event: Omit<AuditEventTable, 'id'>) =>
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

/**
 * Records every successful write of the scope it is registered in: who, what, when and the outcome.
 * Only the route, the path parameters and ids a handler names are kept, never a body, so secret
 * values cannot reach the trail.
 */
export const auditPlugin = fp(async (app: FastifyInstance) => {
  app.decorateRequest('auditIds', null as unknown as Record<string, string>);
  const startAuditIds = async (request: FastifyRequest) => {
    request.auditIds = {};
  };
  // Before the answer leaves, so that a client that saw its write succeed finds it in the trail.
  const recordWrite = async (request: FastifyRequest, reply: FastifyReply) => {
    if (!WRITES.has(request.method) || reply.statusCode >= 400 || !request.principal) return;
    const ids: Record<string, string> = { ...(request.params as Record<string, string>), ...request.auditIds };
    try {
      await insertAuditEvent(app.store.db, {
        accountId: request.principal.accountId,
        clientId: request.principal.clientId,
        method: request.method,
        route: request.routeOptions.url ?? request.url,
        path: request.url.split('?')[0],
        status: reply.statusCode,
        projectId: ids.projectId ?? null,
        resourceIds: JSON.stringify(ids),
        occurredAt: now(),
      });
    } catch (error) {
      request.log.error({ err: error }, 'audit event not recorded');
    }
  };
  // Hooked onto write routes only: a read pays nothing for the trail.
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (!methods.some((method) => WRITES.has(method))) return;
    route.onRequest = [startAuditIds, ...[route.onRequest ?? []].flat()];
    route.onSend = [recordWrite, ...[route.onSend ?? []].flat()];
  });
});
