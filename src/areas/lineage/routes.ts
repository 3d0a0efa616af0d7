import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { LineagePage, LineageQuery } from './schemas.ts';
import { deleteLineageOfProject, eventOf, listLineageEvents } from './service.ts';
import { startLineagePush } from './push.ts';
import { setLineageRecording } from './recording.ts';

/** The account's data lineage as OpenLineage run events (docs/api/lineage.md). */
export async function lineageRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  // DPC_LINEAGE=false: nothing is recorded from now on (recording.ts); what was recorded is still read.
  setLineageRecording(fastify.store.db, fastify.config.lineage);
  // DPC_OPENLINEAGE_URL: every stored event is also POSTed there (push.ts).
  startLineagePush(fastify, eventOf);
  // The steps hold their project without a foreign key (migration 0038): they go in its deleting transaction,
  // after its runs, so that a report adding lineage while the project is deleted has ended first, or fails.
  fastify.projectDeletion.afterRows('lineage', (trx, _dialect, accountId, projectId) =>
    deleteLineageOfProject(trx, accountId, projectId),
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
