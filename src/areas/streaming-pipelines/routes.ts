import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page } from '../../core/paging.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { ProjectParams } from '../projects/schemas.ts';
import { pageInProject, requireProject, writeInProject } from '../projects/repository.ts';
import {
  StreamingPipeline,
  StreamingPipelineListQuery,
  StreamingPipelineParams,
  StreamingPipelineRequest,
  StreamingPipelineStatus,
} from './schemas.ts';
import {
  createStreamingPipeline,
  deleteStreamingPipeline,
  listStreamingPipelines,
  replaceStreamingPipeline,
  requireStreamingPipeline,
  startStreamingPipeline,
  stopStreamingPipeline,
} from './repository.ts';

const tags = ['Streaming pipelines'];

/** Streaming pipeline definitions of a project (E19), and their runs on the agent that owns each. */
export async function streamingPipelineRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/projects/:projectId/streaming-pipelines',
    {
      schema: {
        summary: 'List the streaming pipeline definitions of the project, by name (E19); the page may be empty',
        tags,
        params: ProjectParams,
        querystring: StreamingPipelineListQuery,
        response: { 200: Page(StreamingPipeline) },
      },
    },
    async (request) =>
      pageInProject(app.store.db, request.principal.accountId, request.params.projectId, request.query, listStreamingPipelines),
  );

  app.post(
    '/projects/:projectId/streaming-pipelines',
    {
      schema: {
        summary: 'Create a streaming pipeline definition (stopped)',
        description: 'Passwords and account keys are secret references; a credential-named property with a value is 400.',
        tags,
        params: ProjectParams,
        body: StreamingPipelineRequest,
        response: { 201: StreamingPipeline, ...problems(409) },
      },
    },
    async (request, reply) => {
      const { accountId } = request.principal;
      const { projectId } = request.params;
      const created = await writeInProject(app.store.db, accountId, projectId, (trx) =>
        createStreamingPipeline(trx, accountId, projectId, request.body),
      );
      request.auditIds.streamingPipelineId = created.streamingPipelineId;
      return sendCreated(request, reply, { segment: created.streamingPipelineId }, created);
    },
  );

  app.get(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId',
    {
      schema: {
        summary: 'Get a streaming pipeline definition and its status',
        tags,
        params: StreamingPipelineParams,
        response: { 200: StreamingPipeline },
      },
    },
    async (request) => {
      const { projectId, streamingPipelineId } = request.params;
      await requireProject(app.store.db, request.principal.accountId, projectId);
      return requireStreamingPipeline(app.store.db, projectId, streamingPipelineId);
    },
  );

  app.get(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId/status',
    {
      schema: {
        summary: 'The status of a streaming pipeline',
        tags,
        params: StreamingPipelineParams,
        response: { 200: StreamingPipelineStatus },
      },
    },
    async (request) => {
      const { projectId, streamingPipelineId } = request.params;
      await requireProject(app.store.db, request.principal.accountId, projectId);
      const { status, statusMessage } = await requireStreamingPipeline(app.store.db, projectId, streamingPipelineId);
      return { streamingPipelineId, status, ...(statusMessage !== undefined && { statusMessage }) };
    },
  );

  app.put(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId',
    {
      schema: {
        summary: 'Replace a streaming pipeline definition (only while it is stopped or failed)',
        tags,
        params: StreamingPipelineParams,
        body: StreamingPipelineRequest,
        response: { 200: StreamingPipeline, ...problems(409) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { projectId, streamingPipelineId } = request.params;
      return writeInProject(app.store.db, accountId, projectId, (trx) =>
        replaceStreamingPipeline(trx, accountId, projectId, streamingPipelineId, request.body),
      );
    },
  );

  app.delete(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId',
    {
      schema: {
        summary: 'Delete a streaming pipeline definition (only while it is stopped or failed)',
        tags,
        params: StreamingPipelineParams,
        response: { ...noContent('The definition is deleted.'), ...problems(409) },
      },
    },
    async (request, reply) => {
      const { projectId, streamingPipelineId } = request.params;
      await writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        deleteStreamingPipeline(trx, projectId, streamingPipelineId),
      );
      return reply.code(204).send(null);
    },
  );

  for (const [action, run] of [
    ['start', (trx, accountId, projectId, id) => startStreamingPipeline(trx, accountId, projectId, id)],
    ['stop', (trx, _accountId, projectId, id) => stopStreamingPipeline(trx, projectId, id)],
  ] as const satisfies readonly (readonly [string, (...args: any[]) => Promise<StreamingPipeline>])[]) {
    app.post(
      `/projects/:projectId/streaming-pipelines/:streamingPipelineId/${action}`,
      {
        schema: {
          summary:
            action === 'start'
              ? 'Start a streaming pipeline: its agent is told to run it (STARTING, then RUNNING once the agent reports it)'
              : 'Stop a streaming pipeline: its agent is told to stop it (STOPPING, then STOPPED)',
          tags,
          params: StreamingPipelineParams,
          response: { 202: StreamingPipeline, ...problems(409) },
        },
      },
      async (request, reply) => {
        const { accountId } = request.principal;
        const { projectId, streamingPipelineId } = request.params;
        const pipeline = await writeInProject(app.store.db, accountId, projectId, (trx) =>
          run(trx, accountId, projectId, streamingPipelineId),
        );
        return reply.code(202).send(pipeline);
      },
    );
  }
}
