/**
 * The rules of AI agent tasks as a user drives them: create (checked against the project, its environment
 * and its hosted repository), follow up, answer a permission request, stop. Each write is one transaction
 * with the task's row held; the runtime (runtime.ts) runs the steps in the background.
 */
import { randomUUID } from 'node:crypto';
import type { Config } from '../../core/config.ts';
import { now, type Db, type Trx } from '../../core/db/database.ts';
import { badRequest, conflict, unprocessable } from '../../core/problems.ts';
import { requireEnvironmentId } from '../environments/index.ts';
import { requireProject } from '../projects/index.ts';
import { ensureHostedRepository, externalRepositoryOf, hostedRepositoryPath } from '../repositories/index.ts';
import { branchHead, isValidBranchName } from './git.ts';
import {
  answerUnansweredCalls,
  appendMessages,
  grantedOf,
  insertTask,
  moveTask,
  pendingOf,
  requireTask,
  toTask,
  updateTask,
  type TaskRow,
} from './repository.ts';
import type { AiTaskRuntime } from './runtime.ts';
import type { CreateTaskRequest, Task } from './schemas.ts';
import { pathInWorkingDirectory, ToolError } from './tools.ts';

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
    private readonly runtime: AiTaskRuntime,
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
