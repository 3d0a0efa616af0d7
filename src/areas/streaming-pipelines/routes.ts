import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page } from '../../core/paging.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { pageInProject, ProjectParams, requireProject, writeInProject } from '../projects/index.ts';
import {
  StreamingPipeline,
  StreamingPipelineParams,
  StreamingPipelineQuery,
  StreamingPipelineCommand,
  StreamingPipelineRequest,
  StreamingPipelineStatusAnswer,
  StopQuery,
  DeleteQuery,
} from './schemas.ts';
import {
  DROP_SLOT_WORK,
  START_WORK,
  STOP_WORK,
  onDropSlotReport,
  createPipeline,
  deletePipeline,
  listPipelines,
  onRunReport,
  refuseAgentDeletion,
  readPipeline,
  replacePipeline,
  requestRun,
  requirePipeline,
  statusOf,
  checkNoCredentials,
} from './service.ts';

const tags = ['Streaming Pipelines'];

/** E19 and the rest of a streaming pipeline's life: definitions per project, run by one of the account's agents. */
/** A write with If-Match changes the pipeline only at the version its check saw (core/conditional.ts). */
const rowVersion = { table: 'streamingPipelines', idParam: 'streamingPipelineId' };

export async function streamingPipelineRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const db = app.store.db;
  app.agentWorkReports.on(START_WORK, onRunReport('start'));
  app.agentWorkReports.on(STOP_WORK, onRunReport('stop'));
  app.agentWorkReports.on(DROP_SLOT_WORK, onDropSlotReport);
  // An agent that a streaming pipeline runs on cannot be deleted.
  app.agentDeletion.refuseWhen(refuseAgentDeletion);

  app.get(
    '/projects/:projectId/streaming-pipelines',
    {
      schema: {
        summary: 'List the streaming pipeline definitions of the project; the page may be empty',
        tags,
        params: ProjectParams,
        querystring: StreamingPipelineQuery,
        response: { 200: Page(StreamingPipeline) },
      },
    },
    async (request) => pageInProject(db, request.principal.accountId, request.params.projectId, request.query, listPipelines),
  );

  app.post(
    '/projects/:projectId/streaming-pipelines',
    {
      schema: {
        summary: 'Create a streaming pipeline definition (STOPPED until started)',
        tags,
        params: ProjectParams,
        body: StreamingPipelineRequest,
        response: { 201: StreamingPipeline, ...problems(409, 422) },
      },
    },
    async (request, reply) => {
      const { accountId } = request.principal;
      const { projectId } = request.params;
      checkNoCredentials(request.body);
      const pipeline = await writeInProject(db, accountId, projectId, async (trx) => {
        const created = await createPipeline(trx, accountId, projectId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.streamingPipelineId = created.streamingPipelineId;
        return created;
      });
      return sendCreated(request, reply, { segment: pipeline.streamingPipelineId }, pipeline);
    },
  );

  app.get(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId',
    {
      schema: {
        summary: 'Read a streaming pipeline definition',
        tags,
        params: StreamingPipelineParams,
        response: { 200: StreamingPipeline },
      },
    },
    async (request) => {
      const { projectId, streamingPipelineId } = request.params;
      await requireProject(db, request.principal.accountId, projectId);
      return readPipeline(db, projectId, streamingPipelineId);
    },
  );

  app.put(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId',
    {
      config: { rowVersion },
      schema: {
        summary: 'Replace a streaming pipeline definition (while it is STOPPED or FAILED)',
        tags,
        params: StreamingPipelineParams,
        body: StreamingPipelineRequest,
        response: { 200: StreamingPipeline, ...problems(409, 422) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { projectId, streamingPipelineId } = request.params;
      checkNoCredentials(request.body);
      return writeInProject(db, accountId, projectId, (trx) =>
        replacePipeline(trx, accountId, projectId, streamingPipelineId, request.body),
      );
    },
  );

  app.delete(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId',
    {
      config: { rowVersion },
      schema: {
        summary:
          'Delete a streaming pipeline definition (while it is STOPPED or FAILED); with dropSlot=true its agent also drops its replication slot',
        tags,
        params: StreamingPipelineParams,
        querystring: DeleteQuery,
        response: { ...noContent('The definition is deleted.'), ...problems(409) },
      },
    },
    async (request, reply) => {
      const { projectId, streamingPipelineId } = request.params;
      const { accountId } = request.principal;
      await writeInProject(db, accountId, projectId, (trx) =>
        deletePipeline(trx, accountId, projectId, streamingPipelineId, request.query.dropSlot),
      );
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId/status',
    {
      schema: {
        summary: 'The run status of a streaming pipeline, as its agent last reported it',
        tags,
        params: StreamingPipelineParams,
        response: { 200: StreamingPipelineStatusAnswer },
      },
    },
    async (request) => {
      const { projectId, streamingPipelineId } = request.params;
      await requireProject(db, request.principal.accountId, projectId);
      return statusOf(await requirePipeline(db, projectId, streamingPipelineId));
    },
  );

  for (const action of ['start', 'stop'] as const) {
    app.post(
      `/projects/:projectId/streaming-pipelines/:streamingPipelineId/${action}`,
      {
        schema: {
          summary:
            action === 'start'
              ? 'Start a streaming pipeline: its agent is told to (STARTING, then RUNNING or FAILED)'
              : 'Stop a running streaming pipeline: its agent is told to (STOPPING, then STOPPED)',
          tags,
          params: StreamingPipelineParams,
          ...(action === 'stop' && { querystring: StopQuery }),
          response: { 202: StreamingPipelineStatusAnswer, ...problems(409) },
        },
      },
      async (request, reply) => {
        const force = (request.query as { force?: boolean }).force;
        return reply.code(202).send(await run(request.principal.accountId, request.params, action, force));
      },
    );
  }

  // The vendor's form of the same: one operation, the command in the body.
  app.post(
    '/projects/:projectId/streaming-pipelines/:streamingPipelineId/commands',
    {
      schema: {
        summary: 'Start or stop a streaming pipeline: {command: START|STOP}, as POST .../start and .../stop',
        tags,
        params: StreamingPipelineParams,
        body: StreamingPipelineCommand,
        response: { 202: StreamingPipelineStatusAnswer, ...problems(409) },
      },
    },
    async (request, reply) => {
      const action = request.body.command === 'START' ? 'start' : 'stop';
      return reply.code(202).send(await run(request.principal.accountId, request.params, action));
    },
  );

  function run(accountId: string, params: StreamingPipelineParams, action: 'start' | 'stop', force?: boolean) {
    const { projectId, streamingPipelineId } = params;
    return writeInProject(db, accountId, projectId, (trx) =>
      requestRun(trx, accountId, projectId, streamingPipelineId, action, force),
    );
  }
}
