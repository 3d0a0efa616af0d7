/**
 * The rules of AI agent tasks: how a task is shown, the one place its status moves (states.ts, with its
 * STATUS message and event), its conversation; and as a user drives it: create (checked against the project,
 * its environment and its hosted repository), follow up, answer a permission request, stop. Each write is one
 * transaction with the task's row held; the runtime (runtime.ts) runs the steps in the background. The SQL is
 * the repository's.
 */
import { randomUUID } from 'node:crypto';
import type { Config } from '../../core/config.ts';
import { now, type Db, type Executor, type Trx } from '../../core/db/database.ts';
import { emit } from '../../core/outbox.ts';
import { badRequest, conflict, notFound, unprocessable } from '../../core/problems.ts';
import { keyOf, tokenPageOf, type TokenPageQuery } from '../../core/token-paging.ts';
import { requireEnvironmentId } from '../environments/index.ts';
import { requireProject } from '../projects/index.ts';
import { ensureHostedRepository, externalRepositoryOf, hostedRepositoryPath } from '../repositories/index.ts';
import { branchHead, isValidBranchName } from './git.ts';
import {
  appendMessages,
  findTask,
  insertTask,
  messageRowsAfter,
  messageRowsOf,
  taskStatus,
  updateTask,
  updateTaskStatus,
  type MessageRow,
  type TaskRow,
} from './repository.ts';
import type { CreateTaskRequest, PendingPermission, Task, TaskMessageData } from './schemas.ts';
import { refusal, TRANSITIONS, type TaskEvent, type TaskStatus } from './states.ts';
import { pathInWorkingDirectory, ToolError } from './tools.ts';

/** What the service needs of the runtime (runtime.ts): to schedule a task's next step in the caller's transaction. */
export interface StepScheduler {
  schedule(trx: Trx, task: TaskRow): Promise<void>;
}

/** The tools granted for the rest of the task. */
export function grantedOf(row: TaskRow): string[] {
  return JSON.parse(row.grantedPermissions) as string[];
}

/** The tool call the task waits for permission to run, if any. */
export function pendingOf(row: TaskRow): PendingPermission | undefined {
  return row.pendingPermission === null ? undefined : (JSON.parse(row.pendingPermission) as PendingPermission);
}

/** A task as the API shows it. */
export function toTask(row: TaskRow): Task {
  const pending = pendingOf(row);
  return {
    taskId: row.id,
    status: row.status as TaskStatus,
    ...(row.statusDetail !== null && { statusDetail: row.statusDetail }),
    agentName: row.agentName,
    agentConfig: {
      name: row.agentName,
      environmentName: row.environmentName,
      mode: row.mode as Task['agentConfig']['mode'],
      projectId: row.projectId,
      sourceBranchName: row.sourceBranchName,
      generateBranch: row.generateBranch === 1,
      ...(row.graphId !== null && { graphId: row.graphId }),
      ...(row.targetBranchName !== null && { targetBranchName: row.targetBranchName }),
      workingDirectory: row.workingDirectory,
    },
    grantedPermissions: grantedOf(row).map((toolName) => ({ toolName })),
    ...(pending && { pendingPermission: pending }),
    turns: row.turns,
    toolCalls: row.toolCalls,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/** The task `taskId` of the caller's account, or a 404: another account's task is answered as a missing one. */
export async function requireTask(db: Executor, accountId: string, taskId: string): Promise<TaskRow> {
  const row = await findTask(db, accountId, taskId);
  if (!row) throw notFound(`AI agent task ${taskId} does not exist.`);
  return row;
}

/** The caller's task as the API shows it, or a 404. */
export async function getTask(db: Executor, accountId: string, taskId: string): Promise<Task> {
  return toTask(await requireTask(db, accountId, taskId));
}

/** The one place a task changes status: `event` must be allowed from its current status (else 409), per states.ts. */
export async function moveTask(
  trx: Trx,
  taskId: string,
  event: TaskEvent,
  detail: string | null = null,
  changes: Partial<TaskRow> = {},
): Promise<TaskRow> {
  const { from, to } = TRANSITIONS[event];
  const moved = await updateTaskStatus(trx, taskId, from, { ...changes, status: to, statusDetail: detail });
  if (!moved) throw conflict(refusal(event, (await taskStatus(trx, taskId)) as TaskStatus));
  await appendMessages(trx, taskId, randomUUID(), [{ type: 'STATUS', status: to, ...(detail !== null && { text: detail }) }]);
  await emit(trx, {
    accountId: moved.accountId,
    type: to === 'STOPPED' || to === 'ERRORED' ? 'ai-task.finished' : 'ai-task.status-changed',
    projectId: moved.projectId,
    subject: `ai/agents/tasks/${taskId}`,
    data: { taskId, status: to, ...(detail !== null && { detail }) },
  });
  return moved;
}

function toMessage(row: MessageRow) {
  return { data: JSON.parse(row.data) as TaskMessageData, groupId: row.groupId, timestamp: row.createdAt };
}

/** A page of the caller's task's conversation, after the paging token's message; a 404 for another account's task. */
export async function listTaskMessages(db: Executor, accountId: string, taskId: string, query: TokenPageQuery) {
  const task = await requireTask(db, accountId, taskId);
  const after = keyOf<[number]>(query.paginationToken, ['number'])?.[0] ?? 0;
  const rows = await messageRowsAfter(db, task.id, after, query.limit + 1);
  return tokenPageOf(rows, query.limit, (row) => [Number(row.id)], toMessage);
}

/** The whole conversation, in order (what the model is shown). */
export async function conversationOf(db: Executor, taskId: string): Promise<(MessageRow & { parsed: TaskMessageData })[]> {
  const rows = await messageRowsOf(db, taskId);
  return rows.map((row) => ({ ...row, id: Number(row.id), parsed: JSON.parse(row.data) as TaskMessageData }));
}

/** Tool calls of the conversation that have no result yet, in the order the model asked for them. */
export function unansweredCalls(conversation: { groupId: string; parsed: TaskMessageData }[]) {
  const answered = new Set(conversation.filter((m) => m.parsed.type === 'TOOL_RESULT').map((m) => m.parsed.toolCallId));
  return conversation.filter((m) => m.parsed.type === 'TOOL_CALL' && !answered.has(m.parsed.toolCallId));
}

/** Answers every call still without a result with `why` (the user moved on, or the task was stopped). */
async function answerUnansweredCalls(trx: Trx, taskId: string, why: string): Promise<void> {
  for (const call of unansweredCalls(await conversationOf(trx, taskId))) {
    await appendMessages(trx, taskId, call.groupId, [
      { type: 'TOOL_RESULT', toolCallId: call.parsed.toolCallId, toolName: call.parsed.toolName, error: why },
    ]);
  }
}

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

export class AiTaskService {
  constructor(
    private readonly db: Db,
    private readonly config: Config,
    private readonly runtime: StepScheduler,
  ) {}

  /** Creates a task (RUNNING) with the user's first message and schedules its first step. */
  /** `named` is told the task's project and id in the creating transaction. */
  async create(
    accountId: string,
    clientId: string,
    request: CreateTaskRequest,
    named?: (ids: { projectId: string; taskId: string }) => void,
  ) {
    const { agentConfig, message } = request;
    const { workingDirectory, generateBranch, granted } = checkRequest(request);
    const { projectId } = agentConfig;
    await requireProject(this.db, accountId, projectId);
    await requireEnvironmentId(this.db, projectId, agentConfig.environmentName);
    if (await externalRepositoryOf(this.db, projectId)) {
      throw unprocessable(
        "The project's repository is an external one: AI agent tasks work on the repository this server hosts.",
        ["body.agentConfig.projectId: the project's repository is external"],
      );
    }
    await ensureHostedRepository(this.config, projectId);
    const gitDir = hostedRepositoryPath(this.config, projectId);
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
    await this.db.transaction().execute(async (trx) => {
      await requireProject(trx, accountId, projectId);
      await insertTask(trx, row);
      await appendMessages(trx, taskId, randomUUID(), [{ type: 'USER_MESSAGE', text: message }]);
      await this.runtime.schedule(trx, row);
      named?.({ projectId, taskId });
    });
    return { taskId, projectId, status: 'RUNNING' as const, agentName: row.agentName, createdAt };
  }

  /**
   * A follow-up message: a RUNNING task reads it on its next turn (a call waiting for permission is then
   * answered as not run); a STOPPED task runs again; STOPPING and ERRORED tasks refuse it (409).
   */
  followUp(accountId: string, taskId: string, message: string): Promise<Task> {
    return this.answer(accountId, taskId, async (trx, held) => {
      let task = held.status === 'RUNNING' ? held : await moveTask(trx, held.id, 'followUp');
      // Calls no step is about to run (a step stops at a permission request) are answered now, so
      // that the model sees every call answered.
      if (task.stepJobId === null || task.pendingPermission !== null) {
        await answerUnansweredCalls(trx, task.id, 'Not run: the user sent a message instead.');
      }
      await appendMessages(trx, task.id, randomUUID(), [{ type: 'USER_MESSAGE', text: message }]);
      task = await updateTask(trx, task.id, { pendingPermission: null });
      await this.runtime.schedule(trx, task);
      return updateTask(trx, task.id);
    });
  }

  /** Grants (the tool for the rest of the task) or refuses the call the task waits for; 409 unless it waits for that tool. */
  answerPermission(accountId: string, taskId: string, toolName: string, granted: boolean): Promise<Task> {
    return this.answer(accountId, taskId, async (trx, held) => {
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
      await this.runtime.schedule(trx, task);
      return updateTask(trx, task.id);
    });
  }

  /** STOPPING until the step in progress ends, or STOPPED at once when none is; 409 unless RUNNING. */
  stop(accountId: string, taskId: string): Promise<Task> {
    return this.answer(accountId, taskId, async (trx, held) => {
      const stopping = await moveTask(trx, held.id, 'stop', null, { pendingPermission: null });
      if (stopping.stepJobId !== null) return stopping;
      return moveTask(trx, held.id, 'stepEnded', "Stopped at the user's request.");
    });
  }

  /** Runs `answer` on the caller's task in one transaction, with the task's row held; answers the task as it then is. */
  private answer(accountId: string, taskId: string, answer: (trx: Trx, task: TaskRow) => Promise<TaskRow>): Promise<Task> {
    return this.db.transaction().execute(async (trx) => {
      await requireTask(trx, accountId, taskId);
      return toTask(await answer(trx, await updateTask(trx, taskId)));
    });
  }
}
