import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { problems } from '../../core/openapi.ts';
import { TokenPage, TokenPageQuery } from '../../core/token-paging.ts';
import { AiTaskRuntime } from './runtime.ts';
import { CreateTaskRequest, FollowUpRequest, PermissionAnswer, Task, TaskCreated, TaskMessage, TaskParams } from './schemas.ts';
import { AiTaskService, getTask, listTaskMessages } from './service.ts';

const tags = ['AI Agent Tasks'];

export async function aiTaskRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const runtime = new AiTaskRuntime(app.store, app.config, app.log);
  const tasks = new AiTaskService(app.store.db, app.config, runtime);
  if (app.config.runJobs) {
    app.addHook('onReady', async () => runtime.start());
    app.addHook('onClose', async () => runtime.stop());
  }

  app.post(
    '/ai/agents/tasks',
    {
      schema: {
        summary: 'Create an AI agent task and start it',
        description:
          'The task runs in the background; its conversation is read from the messages operation. ACT tasks need a target: targetBranchName, or generateBranch true for a branch the server names.',
        tags,
        body: CreateTaskRequest,
        response: { 201: TaskCreated, ...problems(422) },
      },
    },
    async (request, reply) => {
      const { accountId, clientId } = request.principal;
      // Named in the transaction, whose commit writes the write's outbox event.
      const created = await tasks.create(accountId, clientId, request.body, (ids) => Object.assign(request.auditIds, ids));
      const { projectId: _, ...answer } = created;
      return sendCreated(request, reply, { segment: created.taskId }, answer);
    },
  );

  app.get(
    '/ai/agents/tasks/:taskId',
    {
      schema: {
        summary: 'An AI agent task: its status, configuration, counters and any permission it waits for',
        tags,
        params: TaskParams,
        response: { 200: Task },
      },
    },
    async (request) => getTask(app.store.db, request.principal.accountId, request.params.taskId),
  );

  app.get(
    '/ai/agents/tasks/:taskId/messages',
    {
      schema: {
        summary: 'The conversation of an AI agent task, in order, one group per turn of the agent',
        tags,
        params: TaskParams,
        querystring: TokenPageQuery,
        response: { 200: TokenPage(TaskMessage) },
      },
    },
    async (request) => listTaskMessages(app.store.db, request.principal.accountId, request.params.taskId, request.query),
  );

  app.post(
    '/ai/agents/tasks/:taskId/messages',
    {
      schema: {
        summary: 'Send the agent a follow-up message',
        description:
          'A RUNNING task reads it on its next turn (a tool call waiting for permission is then answered as not run); a STOPPED task runs again. 409 for STOPPING and ERRORED tasks.',
        tags,
        params: TaskParams,
        body: FollowUpRequest,
        response: { 202: Task, ...problems(409) },
      },
    },
    async (request, reply) => {
      const task = await tasks.followUp(request.principal.accountId, request.params.taskId, request.body.message);
      return reply.code(202).send(task);
    },
  );

  app.post(
    '/ai/agents/tasks/:taskId/permissions',
    {
      schema: {
        summary: 'Grant or refuse the tool call the agent asked permission for',
        description:
          'Granting runs the call and lets the agent use the tool for the rest of the task without asking; refusing answers the call with an error the agent reads. 409 unless the task waits for permission to use that tool.',
        tags,
        params: TaskParams,
        body: PermissionAnswer,
        response: { 202: Task, ...problems(409) },
      },
    },
    async (request, reply) => {
      const { toolName, granted } = request.body;
      const task = await tasks.answerPermission(request.principal.accountId, request.params.taskId, toolName, granted);
      return reply.code(202).send(task);
    },
  );

  app.post(
    '/ai/agents/tasks/:taskId/stop',
    {
      schema: {
        summary: 'Stop a running AI agent task gracefully',
        description:
          'The task is STOPPING until the step in progress (a model call or a tool call) ends, then STOPPED; with no step in progress (waiting for the user) it is STOPPED at once. 409 when the task is not RUNNING.',
        tags,
        params: TaskParams,
        response: { 202: Task, ...problems(409) },
      },
    },
    async (request, reply) => {
      return reply.code(202).send(await tasks.stop(request.principal.accountId, request.params.taskId));
    },
  );
}
