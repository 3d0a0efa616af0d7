import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { now, type Trx } from '../../core/db/database.ts';
import { problems } from '../../core/openapi.ts';
import { badRequest, conflict, unprocessable } from '../../core/problems.ts';
import { TokenPage, TokenPageQuery } from '../../core/token-paging.ts';
import { requireEnvironmentId } from '../environments/index.ts';
import { requireProject } from '../projects/index.ts';
import { ensureHostedRepository, externalRepositoryOf, hostedRepositoryPath } from '../repositories/index.ts';
import { branchHead, isValidBranchName } from './git.ts';
import {
  answerUnansweredCalls,
  appendMessages,
  grantedOf,
  insertTask,
  listMessages,
  moveTask,
  pendingOf,
  requireTask,
  toTask,
  updateTask,
  type TaskRow,
} from './repository.ts';
import { AiTaskRuntime } from './runtime.ts';
import { CreateTaskRequest, FollowUpRequest, PermissionAnswer, Task, TaskCreated, TaskMessage, TaskParams } from './schemas.ts';
import { pathInWorkingDirectory, ToolError } from './tools.ts';

const tags = ['AI Agent Tasks'];

/**
 * What the schema cannot say about a create request: each tool granted once, a target that fits the mode,
 * a working directory inside the repository. All violations at once, as a 400.
 */
function checkRequest({ agentConfig, grantedPermissions = [] }: CreateTaskRequest) {
  const granted = new Set<string>();
  const violations = grantedPermissions.flatMap(({ toolName }, index) => {
    if (!granted.has(toolName)) return (granted.add(toolName), []);
    return [`body.grantedPermissions.${index}.toolName: "${toolName}" is listed more than once`];
  });
  const generateBranch = agentConfig.generateBranch ?? false;
  const named = agentConfig.targetBranchName !== undefined;
  const target = 'body.agentConfig.targetBranchName';
  if (agentConfig.mode === 'ACT' && generateBranch && named) {
    violations.push(`${target}: must not be given when generateBranch is true (the server names the branch)`);
  } else if (agentConfig.mode === 'ACT' && !generateBranch && !named) {
    violations.push(`${target}: is required in ACT mode unless generateBranch is true`);
  } else if (agentConfig.mode === 'PLAN' && (generateBranch || named)) {
    violations.push(`${target}: a PLAN task writes nothing, so it takes neither a target branch nor generateBranch`);
  }
  let workingDirectory = '';
  try {
    workingDirectory = pathInWorkingDirectory('', agentConfig.workingDirectory ?? '');
  } catch (error) {
    if (!(error instanceof ToolError)) throw error;
    violations.push(`body.agentConfig.workingDirectory: ${error.message}`);
  }
  if (violations.length > 0) throw badRequest('The task cannot be created as asked.', violations);
  return { workingDirectory, generateBranch, granted: [...granted] };
}

/** A branch name the server makes up for generateBranch: ai/<agent name as a slug>-<start of the task id>. */
function generatedBranchName(agentName: string, taskId: string): string {
  const slug = agentName
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 40);
  return `ai/${slug || 'agent'}-${taskId.slice(0, 8)}`;
}

export async function aiTaskRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const runtime = new AiTaskRuntime(app.store, app.config, app.log);
  if (app.config.runJobs) {
    app.addHook('onReady', async () => runtime.start());
    app.addHook('onClose', async () => runtime.stop());
  }

  app.post(
    '/ai/agents/tasks',
    {
      schema: {
        summary: 'Create an AI agent task and start it (E20)',
        description:
          'The task runs in the background; its conversation is read from the messages operation. ACT tasks need a target: targetBranchName, or generateBranch true for a branch the server names.',
        tags,
        body: CreateTaskRequest,
        response: { 201: TaskCreated, ...problems(422) },
      },
    },
    async (request, reply) => {
      const { agentConfig, message } = request.body;
      const { accountId, clientId } = request.principal;

      const { workingDirectory, generateBranch, granted } = checkRequest(request.body);

      const { projectId } = agentConfig;
      await requireProject(app.store.db, accountId, projectId);
      await requireEnvironmentId(app.store.db, projectId, agentConfig.environmentName);
      if (await externalRepositoryOf(app.store.db, projectId)) {
        throw unprocessable(
          "The project's repository is an external one: AI agent tasks work on the repository this server hosts.",
          ["body.agentConfig.projectId: the project's repository is external"],
        );
      }
      await ensureHostedRepository(app.config, projectId);
      const gitDir = hostedRepositoryPath(app.config, projectId);
      if (agentConfig.targetBranchName !== undefined && !(await isValidBranchName(gitDir, agentConfig.targetBranchName))) {
        throw badRequest('The target branch name is not a valid Git branch name.', [
          'body.agentConfig.targetBranchName: not a valid branch name',
        ]);
      }
      // A name git would read as something else (main~1, a@{1}) names no branch either.
      const source = agentConfig.sourceBranchName;
      if (!(await isValidBranchName(gitDir, source)) || !(await branchHead(gitDir, source))) {
        throw unprocessable(`The project's repository has no branch "${agentConfig.sourceBranchName}".`, [
          `body.agentConfig.sourceBranchName: no such branch in the project's repository`,
        ]);
      }

      const taskId = randomUUID();
      const createdAt = now();
      const row: TaskRow = {
        id: taskId,
        accountId,
        projectId,
        environmentName: agentConfig.environmentName,
        agentName: agentConfig.name,
        mode: agentConfig.mode,
        sourceBranchName: agentConfig.sourceBranchName,
        targetBranchName: generateBranch ? generatedBranchName(agentConfig.name, taskId) : (agentConfig.targetBranchName ?? null),
        generateBranch: generateBranch ? 1 : 0,
        graphId: agentConfig.graphId ?? null,
        workingDirectory,
        grantedPermissions: JSON.stringify(granted),
        status: 'RUNNING',
        statusDetail: null,
        pendingPermission: null,
        stepJobId: null,
        turns: 0,
        toolCalls: 0,
        workedMs: 0,
        createdBy: clientId,
        createdAt,
        updatedAt: createdAt,
      };
      await app.store.db.transaction().execute(async (trx) => {
        await requireProject(trx, accountId, projectId);
        await insertTask(trx, row);
        await appendMessages(trx, taskId, randomUUID(), [{ type: 'USER_MESSAGE', text: message }]);
        await runtime.schedule(trx, row);
      });
      request.auditIds.projectId = projectId;
      request.auditIds.taskId = taskId;
      return sendCreated(
        request,
        reply,
        { segment: taskId },
        { taskId, status: 'RUNNING' as const, agentName: row.agentName, createdAt },
      );
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
    async (request) => toTask(await requireTask(app.store.db, request.principal.accountId, request.params.taskId)),
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
    async (request) => {
      const task = await requireTask(app.store.db, request.principal.accountId, request.params.taskId);
      return listMessages(app.store.db, task.id, request.query);
    },
  );

  /** Runs `answer` on the caller's task in one transaction, with the task's row held; answers the task as it then is. */
  const answerTask = (accountId: string, taskId: string, answer: (trx: Trx, task: TaskRow) => Promise<TaskRow>) =>
    app.store.db.transaction().execute(async (trx) => {
      await requireTask(trx, accountId, taskId);
      return toTask(await answer(trx, await updateTask(trx, taskId)));
    });

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
      const task = await answerTask(request.principal.accountId, request.params.taskId, async (trx, held) => {
        let task = held.status === 'RUNNING' ? held : await moveTask(trx, held.id, 'followUp');
        // Calls no step is about to run (a step stops at a permission request) are answered now, so
        // that the model sees every call answered.
        if (task.stepJobId === null || task.pendingPermission !== null) {
          await answerUnansweredCalls(trx, task.id, 'Not run: the user sent a message instead.');
        }
        await appendMessages(trx, task.id, randomUUID(), [{ type: 'USER_MESSAGE', text: request.body.message }]);
        task = await updateTask(trx, task.id, { pendingPermission: null });
        await runtime.schedule(trx, task);
        return updateTask(trx, task.id);
      });
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
      const task = await answerTask(request.principal.accountId, request.params.taskId, async (trx, held) => {
        const pending = pendingOf(held);
        if (held.status !== 'RUNNING' || pending?.toolName !== toolName) {
          throw conflict(`The task is not waiting for permission to use ${toolName}.`);
        }
        await appendMessages(trx, held.id, randomUUID(), [
          { type: 'PERMISSION_ANSWER', toolCallId: pending.toolCallId, toolName, granted },
        ]);
        if (!granted) {
          await appendMessages(trx, held.id, randomUUID(), [
            { type: 'TOOL_RESULT', toolCallId: pending.toolCallId, toolName, error: 'Not run: the user refused permission.' },
          ]);
        }
        const grantedPermissions = granted ? [...new Set([...grantedOf(held), toolName])] : grantedOf(held);
        const task = await updateTask(trx, held.id, {
          pendingPermission: null,
          grantedPermissions: JSON.stringify(grantedPermissions),
        });
        await runtime.schedule(trx, task);
        return updateTask(trx, task.id);
      });
      return reply.code(202).send(task);
    },
  );

  app.post(
    '/ai/agents/tasks/:taskId/stop',
    {
      schema: {
        summary: 'Stop a running AI agent task gracefully (E21)',
        description:
          'The task is STOPPING until the step in progress (a model call or a tool call) ends, then STOPPED; with no step in progress (waiting for the user) it is STOPPED at once. 409 when the task is not RUNNING.',
        tags,
        params: TaskParams,
        response: { 202: Task, ...problems(409) },
      },
    },
    async (request, reply) => {
      const task = await answerTask(request.principal.accountId, request.params.taskId, async (trx, held) => {
        const stopping = await moveTask(trx, held.id, 'stop', null, { pendingPermission: null });
        if (stopping.stepJobId !== null) return stopping;
        return moveTask(trx, held.id, 'stepEnded', "Stopped at the user's request.");
      });
      return reply.code(202).send(task);
    },
  );
}
