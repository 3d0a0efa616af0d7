import { emit } from '../../core/outbox.ts';
import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../core/config.ts';
import type { Store, Trx } from '../../core/db/database.ts';
import { isTransientStoreFailure } from '../../core/db/database.ts';
import { JobQueue } from '../../core/jobs.ts';
import { appendMessages, updateTask, type TaskRow } from './repository.ts';
import { conversationOf, grantedOf, moveTask, unansweredCalls, type StepScheduler } from './service.ts';
import { chatMessages, configuredModel, ModelAborted, ModelFailure, NO_MODEL, toolDefinitions, type ChatModel } from './model.ts';
import { runTool, toolNamed, toolsFor } from './tools.ts';
import { checkedArguments } from './arguments.ts';

const STEP_JOB = 'ai-task.step';
/** Runs of one step past which a step the server keeps dying in is given up (its tools may have run already). */
const MAX_STEP_RUNS = 3;

/** The server is shutting down: the step is left for the queue to run again (here on restart, or elsewhere). */
class ShuttingDown extends Error {}

/** How a step ended. What comes after `continue` follows from the task's row as endStep() finds it. */
type StepOutcome =
  | { kind: 'continue' }
  /** The agent answered without a tool call; `seen` is the last message it was shown. */
  | { kind: 'finished'; seen: number }
  | { kind: 'failed'; detail: string };

/**
 * Runs AI agent tasks as a chain of durable jobs, one step per job: a step is either one call of the
 * model or the running of the tool calls it asked for. Each step records what it did in the store and
 * queues the next in the same transaction, so a server that stops loses nothing: another process (or
 * this one on restart) takes the job over once its lease runs out and repeats that step. The jobs have
 * a queue of their own so that slow model calls do not hold other areas' background work up.
 */
export class AiTaskRuntime implements StepScheduler {
  readonly queue: JobQueue;
  private readonly model: ChatModel | undefined;
  private readonly shutdown = new AbortController();
  private readonly settings: Config['aiModel'];

  constructor(
    private readonly store: Store,
    private readonly config: Config,
    private readonly log: FastifyBaseLogger,
  ) {
    this.settings = config.aiModel;
    this.model = configuredModel(config.aiModel, log);
    this.queue = new JobQueue(store, { log, leaseMs: config.aiModel.timeoutMs * 3 + 60_000 });
    this.queue.register(STEP_JOB, (payload, job) => this.step((payload as { taskId: string }).taskId, job));
  }

  start(): void {
    this.queue.start();
  }

  /** Stops taking steps; a model call in progress is abandoned, and its step runs again after a restart. */
  async stop(): Promise<void> {
    this.shutdown.abort();
    await this.queue.stop();
  }

  /** Makes sure a step of the task is under way: queues one unless one is already queued or running. */
  async schedule(trx: Trx, task: TaskRow): Promise<void> {
    if (task.stepJobId !== null) return;
    const stepJobId = await this.queue.enqueue(
      trx,
      STEP_JOB,
      { taskId: task.id },
      {
        // step() itself gives up after MAX_STEP_RUNS; the queue must not drop the job before it can say so.
        maxAttempts: MAX_STEP_RUNS + 3,
      },
    );
    await updateTask(trx, task.id, { stepJobId });
  }

  private async step(taskId: string, job: { id: string; attempts: number }): Promise<void> {
    const task = await this.store.db.selectFrom('aiTasks').selectAll().where('id', '=', taskId).executeTakeFirst();
    // A job of a step that a later one replaced (or of a deleted task) has nothing to do.
    if (!task || task.stepJobId !== job.id) return;
    const started = Date.now();
    let outcome: StepOutcome;
    if (job.attempts > MAX_STEP_RUNS) {
      outcome = {
        kind: 'failed',
        detail: `The server stopped ${job.attempts - 1} times in the middle of a step of this task; it was ended rather than repeat that step again.`,
      };
    } else {
      try {
        outcome = await this.advance(task);
      } catch (error) {
        if (isTransientStoreFailure(error) || error instanceof ShuttingDown) throw error; // the queue runs the step again
        this.log.error({ err: error, taskId }, 'AI agent task step failed');
        // The cause stays in the log: it may hold internals the task's readers should not see.
        outcome = { kind: 'failed', detail: 'A step of the task failed unexpectedly; the server log has the cause (by taskId).' };
      }
    }
    await this.endStep(task.id, job.id, outcome, Date.now() - started);
  }

  /** One step: answer the tool calls that wait for it, or else ask the model for its next turn. */
  private async advance(task: TaskRow): Promise<StepOutcome> {
    if (task.status !== 'RUNNING' || task.pendingPermission !== null) return { kind: 'continue' };
    const limitMs = this.settings.maxTaskSeconds * 1000;
    if (task.workedMs >= limitMs) return { kind: 'failed', detail: this.timeLimit() };
    const conversation = await conversationOf(this.store.db, task.id);
    const unanswered = unansweredCalls(conversation);
    if (unanswered.length > 0) return this.runCalls(task, unanswered);

    if (!this.model) return { kind: 'failed', detail: NO_MODEL };
    if (task.turns >= this.settings.maxTurns) {
      return {
        kind: 'failed',
        detail: `The turn limit is reached: ${this.settings.maxTurns} model calls per task (DPC_AI_MAX_TURNS).`,
      };
    }
    const remainingMs = limitMs - task.workedMs;
    const deadline = AbortSignal.timeout(remainingMs);
    let turn;
    try {
      const signal = AbortSignal.any([deadline, this.shutdown.signal]);
      turn = await this.model.answer(chatMessages(task, conversation), toolDefinitions(task), signal);
    } catch (error) {
      if (error instanceof ModelAborted && this.shutdown.signal.aborted) throw new ShuttingDown('shutting down');
      if (error instanceof ModelAborted && deadline.aborted) return { kind: 'failed', detail: this.timeLimit() };
      if (error instanceof ModelFailure) return { kind: 'failed', detail: error.message };
      throw error;
    }
    const groupId = randomUUID();
    const toolCalls = task.toolCalls + turn.toolCalls.length;
    const checked = turn.toolCalls.map((call) => ({ call, args: checkedArguments(call.argumentsText) }));
    await this.store.db.transaction().execute(async (trx) => {
      await updateTask(trx, task.id, { turns: task.turns + 1, toolCalls });
      await appendMessages(trx, task.id, groupId, [
        ...(turn.text !== null ? [{ type: 'AGENT_MESSAGE' as const, text: turn.text }] : []),
        ...checked.map(({ call, args }) => ({
          type: 'TOOL_CALL' as const,
          toolCallId: call.id,
          toolName: call.name,
          ...(toolNamed(call.name) && { access: toolNamed(call.name)!.access }),
          arguments: 'value' in args ? args.value : args.excerpt,
        })),
        // Arguments past a bound are answered at once, as a bad argument is: the model reads why.
        ...checked.flatMap(({ call, args }) =>
          'error' in args ? [{ type: 'TOOL_RESULT' as const, toolCallId: call.id, toolName: call.name, error: args.error }] : [],
        ),
      ]);
    });
    if (toolCalls > this.settings.maxToolCalls) {
      return {
        kind: 'failed',
        detail: `The tool call limit is reached: ${this.settings.maxToolCalls} tool calls per task (DPC_AI_MAX_TOOL_CALLS).`,
      };
    }
    if (turn.toolCalls.length === 0) return { kind: 'finished', seen: conversation.at(-1)?.id ?? 0 };
    return { kind: 'continue' };
  }

  /** Runs the waiting calls in order, each once it is granted; the first one not granted asks the user and waits. */
  private async runCalls(task: TaskRow, calls: ReturnType<typeof unansweredCalls>): Promise<StepOutcome> {
    const granted = new Set(grantedOf(task));
    for (const call of calls) {
      const { toolCallId, toolName, arguments: input } = call.parsed;
      const status = await this.statusOf(task.id);
      if (status !== 'RUNNING') return { kind: 'continue' };
      // A call of a tool the task does not offer is not asked about: runTool answers it with an error.
      const tool = toolsFor(task.mode).find((candidate) => candidate.name === toolName);
      if (tool && !granted.has(tool.name)) {
        const pending = { toolCallId: toolCallId!, toolName: tool.name, access: tool.access, arguments: input };
        await this.store.db.transaction().execute(async (trx) => {
          await updateTask(trx, task.id, { pendingPermission: JSON.stringify(pending) });
          await appendMessages(trx, task.id, call.groupId, [
            {
              type: 'PERMISSION_REQUEST',
              ...pending,
              text: `The agent asks to run ${tool.name} (${tool.access === 'WRITE' ? 'it writes' : 'it reads'}); grant or refuse it.`,
            },
          ]);
          await emit(trx, {
            accountId: task.accountId,
            type: 'ai-task.waiting-for-permission',
            projectId: task.projectId,
            subject: `ai/agents/tasks/${task.id}`,
            data: { taskId: task.id, toolName: tool.name, access: tool.access, toolCallId: toolCallId! },
          });
        });
        return { kind: 'continue' };
      }
      const outcome = await runTool({ db: this.store.db, config: this.config, task }, toolName!, input);
      await this.store.db.transaction().execute(async (trx) => {
        await updateTask(trx, task.id);
        // The user may have answered the call meanwhile (a follow-up message); the first answer stands.
        const waiting = unansweredCalls(await conversationOf(trx, task.id)).some(
          (other) => other.parsed.toolCallId === toolCallId,
        );
        if (!waiting) return;
        await appendMessages(trx, task.id, call.groupId, [{ type: 'TOOL_RESULT', toolCallId, toolName, ...outcome }]);
      });
    }
    return { kind: 'continue' };
  }

  private async statusOf(taskId: string): Promise<string | undefined> {
    const row = await this.store.db.selectFrom('aiTasks').select('status').where('id', '=', taskId).executeTakeFirst();
    return row?.status;
  }

  private timeLimit(): string {
    return `The time limit is reached: ${this.settings.maxTaskSeconds} s of work per task (DPC_AI_MAX_TASK_SECONDS).`;
  }

  /**
   * Records how the step ended and what comes next, in one transaction with the task's row held. The
   * row, not the step, says whether to wait: the user may have answered a permission request, sent a
   * message or asked to stop while the step ran.
   */
  private async endStep(taskId: string, jobId: string, outcome: StepOutcome, elapsedMs: number): Promise<void> {
    await this.store.db.transaction().execute(async (trx) => {
      const held = await trx
        .updateTable('aiTasks')
        .set((eb) => ({ workedMs: eb('workedMs', '+', elapsedMs) }))
        .where('id', '=', taskId)
        .where('stepJobId', '=', jobId)
        .returningAll()
        .executeTakeFirst();
      if (!held) return;
      const done = { stepJobId: null, pendingPermission: null };
      if (held.status !== 'RUNNING' && held.status !== 'STOPPING') {
        await updateTask(trx, taskId, { stepJobId: null });
      } else if (outcome.kind === 'failed') {
        await moveTask(trx, taskId, 'failed', outcome.detail, done);
      } else if (held.status === 'STOPPING') {
        await moveTask(trx, taskId, 'stepEnded', "Stopped at the user's request.", done);
      } else if (outcome.kind === 'finished' && !(await this.userSpokeSince(trx, taskId, outcome.seen))) {
        await moveTask(trx, taskId, 'finished', 'The agent finished its answer; send a message to carry on.', done);
      } else if (held.pendingPermission !== null) {
        await updateTask(trx, taskId, { stepJobId: null }); // waits for the user's answer
      } else {
        await this.schedule(trx, { ...held, stepJobId: null });
      }
    });
  }

  private async userSpokeSince(trx: Trx, taskId: string, seen: number): Promise<boolean> {
    const later = await trx
      .selectFrom('aiTaskMessages')
      .select('data')
      .where('taskId', '=', taskId)
      .where('id', '>', seen)
      .execute();
    return later.some((row) => (JSON.parse(row.data) as { type: string }).type === 'USER_MESSAGE');
  }
}
