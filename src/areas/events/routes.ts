import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { Page, PageQuery, countOf, offsetOf, pageOf } from '../../core/paging.ts';
import { badRequest } from '../../core/problems.ts';
import { ProjectId } from '../projects/index.ts';

const AuditEvent = Type.Object(
  {
    id: Type.Integer(),
    occurredAt: Type.String({ format: 'date-time' }),
    clientId: Type.String({ description: 'the API client that made the change' }),
    method: Type.String(),
    route: Type.String({ description: 'the operation, as its path template' }),
    path: Type.String(),
    status: Type.Integer({ description: 'the status the operation answered' }),
    projectId: Type.Optional(Type.String()),
    resourceIds: Type.Record(Type.String(), Type.String(), { description: 'ids of what the operation touched' }),
  },
  {
    examples: [
      {
        id: 42,
        occurredAt: '2026-11-22T09:30:00.000Z',
        clientId: '2f0c8a9e-77a4-4c1e-8d2b-5a1f9b7e3c21',
        method: 'POST',
        route: '/dpc/v1/projects/:projectId/environments',
        path: '/dpc/v1/projects/5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11/environments',
        status: 201,
        projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
        resourceIds: { projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11', environmentName: 'production' },
      },
    ],
  },
);

const EventQuery = Type.Object({
  ...PageQuery.properties,
  projectId: Type.Optional(ProjectId),
  from: Type.Optional(Type.String({ format: 'date-time', description: 'only events at or after this time' })),
  to: Type.Optional(Type.String({ format: 'date-time', description: 'only events before this time' })),
});

/** The audit trail of the caller's account: every successful write, newest first. */
export async function eventRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/events',
    {
      schema: {
        summary: 'List audit events',
        tags: ['Audit Events'],
        querystring: EventQuery,
        response: { 200: Page(AuditEvent) },
      },
    },
    async (request) => {
      const { projectId, from, to } = request.query;
      const fromIso = from && new Date(from).toISOString();
      const toIso = to && new Date(to).toISOString();
      if (fromIso && toIso && fromIso > toIso) throw badRequest('The time range is empty.', ['from: must not be after to']);
      let query = app.store.db.selectFrom('auditEvents').where('accountId', '=', request.principal.accountId);
      if (projectId) query = query.where('projectId', '=', projectId);
      if (fromIso) query = query.where('occurredAt', '>=', fromIso);
      if (toIso) query = query.where('occurredAt', '<', toIso);
      const [rows, total] = await Promise.all([
        query.selectAll().orderBy('id', 'desc').limit(request.query.size).offset(offsetOf(request.query)).execute(),
        countOf(query),
      ]);
      const results = rows.map((row) => ({
        id: Number(row.id),
        occurredAt: row.occurredAt,
        clientId: row.clientId,
        method: row.method,
        route: row.route,
        path: row.path,
        status: row.status,
        ...(row.projectId !== null && { projectId: row.projectId }),
        resourceIds: JSON.parse(row.resourceIds) as Record<string, string>,
      }));
      return pageOf(request.query, results, total);
    },
  );
}
