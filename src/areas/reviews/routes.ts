import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { problems } from '../../core/openapi.ts';
import { ProjectParams, requireProject } from '../projects/index.ts';
import { Review, ReviewRequest } from './schemas.ts';
import { reviewPipelines } from './service.ts';

/** Pipeline quality review (docs/api/reviews.md). */
export async function reviewRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.post(
    '/projects/:projectId/reviews',
    {
      // A review reads and stores nothing: any role may ask for one, and it leaves no audit event.
      config: { role: 'viewer', readOnly: true },
      schema: {
        summary: 'Review the pipelines of a version',
        description:
          'Findings per file and component (rule, severity, location, message) for a published version of an environment (the latest enabled one without versionName) or for files sent in the request: unreachable components, missing parameters, unknown variables, child pipelines that are not there, cycles, SQL that does not parse, credentials written into parameters. Nothing is stored.',
        tags: ['Pipeline Quality Review'],
        params: ProjectParams,
        body: ReviewRequest,
        response: { 200: Review, ...problems(404, 410) },
      },
    },
    async (request) => {
      const { projectId } = request.params;
      await requireProject(app.store.db, request.principal.accountId, projectId);
      return reviewPipelines(app.store.db, projectId, request.body);
    },
  );
}
