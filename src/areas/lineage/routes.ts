import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { LineagePage, LineageQuery } from './schemas.ts';
import { deleteProjectLineage } from './repository.ts';
import { listLineageEvents } from './service.ts';

/** The account's data lineage as OpenLineage run events (docs/api/lineage.md). */
export async function lineageRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  // The steps hold their project without a foreign key (migration 0038): they go in its deleting transaction.
  fastify.projectDeletion.inTransaction('lineage', (trx, _dialect, accountId, projectId) =>
    deleteProjectLineage(trx, accountId, projectId),
  );
  app.get(
    '/lineage/events',
    {
      schema: {
        summary: 'List lineage events',
        description:
          'OpenLineage 1.x run events of the steps that read or wrote datasets, recorded in [generatedFrom, generatedBefore) (at most 31 days), in the order they were recorded.',
        tags: ['Lineage'],
        querystring: LineageQuery,
        response: { 200: LineagePage },
      },
    },
    async (request) => listLineageEvents(app.store.db, request.principal.accountId, request.query),
  );
}
