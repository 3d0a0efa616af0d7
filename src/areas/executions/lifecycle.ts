/**
 * How a run moves once started: the agent's reports, a user's cancel, and the agent falling out of
 * contact. Every move goes through moveExecution (the state table).
 */
import { checkExpectedVersion } from '../../core/conditional.ts';
import type { Db, Executor } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { FAILURE_CODES, type ExecutionPayload } from '../../contract/work.ts';
import { badRequest } from '../../core/problems.ts';
import {
  agentsInContactSince,
  cancelAgentWork,
  cancelledWorkIds,
  goneWorkIds,
  type AgentReport,
  type AgentWork,
} from '../agents/index.ts';
import { recordStepLineage } from '../lineage/index.ts';
import { emit } from '../../core/outbox.ts';
import { executionOfWork, heldRuns, pipelineRunByStep, quietRuns, unfinishedRuns } from './repository.ts';
import { eventPrefix, moveExecution, recordStep, rootJobOf, type ExecutionRow, type ReportedStep } from './service.ts';
import { IllegalTransition, isFinal, type ExecutionEvent, type ExecutionStatus } from './states.ts';

interface ReportBody {
  step?: ReportedStep;
  message?: string;
  code?: string;
  failedPipelines?: unknown;
}

/** The event a final report stands for, by the contract's failure code. */
function eventOf(report: AgentReport): ExecutionEvent {
  if (report.type === 'progress') return 'agent-progress';
  if (report.type === 'done') return 'agent-done';
  const code = (report.body as ReportBody | null)?.code;
  return code === FAILURE_CODES.cancelled
    ? 'agent-cancelled'
    : code === FAILURE_CODES.forbidden
      ? 'agent-forbidden'
      : 'agent-failed';
}

function isStep(value: unknown): value is NonNullable<ReportBody['step']> {
  const step = value as ReportBody['step'];
  return (
    typeof step === 'object' &&
    step !== null &&
    Number.isInteger(step.index) &&
    step.index >= 0 &&
    typeof step.name === 'string' &&
    typeof step.status === 'string' &&
    typeof step.startedAt === 'string'
  );
}

/** Whether `pipeline` is one of the work's pipeline files: the run's own, one it was delivered with, a test of it. */
function holds(work: AgentWork, run: { pipelineName: string | null }, pipeline: string): boolean {
  const payload = work.payload as Partial<ExecutionPayload> | null | undefined;
  return (
    pipeline === run.pipelineName ||
    (typeof payload?.pipelines === 'object' && payload.pipelines !== null && Object.hasOwn(payload.pipelines, pipeline)) ||
    (Array.isArray(payload?.tests) && payload.tests.includes(pipeline))
  );
}

/**
 * The pipeline a reported step belongs to: the run's own, or the one its `childPipeline` names, which must be
 * a pipeline of the work the agent holds (the files the run was given: its pipeline and the child pipelines
 * it runs from its artifact version; for tests, the test pipelines); 400 naming the field otherwise. It is
 * the step's job in lineage and the child pipeline the steps list shows: an agent names no other. So must the
 * pipeline a step runs (`runsPipeline`) be, and a step runs one (the first reported for it); a child
 * pipeline's step may name the step that runs it (`parentStep`): an earlier step of the run reported running
 * that pipeline, and only with `childPipeline`. Checked against the run's steps, whether or not lineage is kept.
 */
async function pipelineOfStep(
  trx: Executor,
  work: AgentWork,
  run: { id: string; pipelineName: string | null; testName: string | null },
  step: ReportedStep,
): Promise<string> {
  const violations: string[] = [];
  const child = step.childPipeline;
  const parentStep =
    "body.body.step.parentStep: must be the index of an earlier step reported running this step's childPipeline (runsPipeline), with childPipeline";
  if (child !== undefined && !holds(work, run, child)) {
    violations.push('body.body.step.childPipeline: must be a pipeline of the run (its own or a child pipeline it runs)');
  }
  if (step.runsPipeline !== undefined && !holds(work, run, step.runsPipeline)) {
    violations.push('body.body.step.runsPipeline: must be a pipeline of the run (a child pipeline it runs)');
  } else if (step.runsPipeline !== undefined) {
    const runs = await pipelineRunByStep(trx, { executionId: run.id, position: step.index });
    if (runs != null && runs !== step.runsPipeline) {
      violations.push(`body.body.step.runsPipeline: step ${step.index} runs ${JSON.stringify(runs)} (a step runs one pipeline)`);
    }
  }
  if (step.parentStep !== undefined) {
    if (child === undefined || step.parentStep >= step.index) violations.push(parentStep);
    else if ((await pipelineRunByStep(trx, { executionId: run.id, position: step.parentStep })) !== child) {
      violations.push(parentStep);
    }
  }
  if (violations.length > 0) throw badRequest('The step names a pipeline or step that is not part of this run.', violations);
  return child ?? rootJobOf(run);
}

/**
 * A failed test run's `failedPipelines` (WorkFailureBody): with code `pipeline-failed`, the test pipelines that
 * failed, each one of the work's `tests` and named once; 400 naming the field otherwise. Undefined without it.
 */
function failedPipelinesOf(work: AgentWork, body: ReportBody): string[] | undefined {
  const failed = body.failedPipelines;
  if (failed === undefined) return undefined;
  const tests = (work.payload as Partial<ExecutionPayload> | null | undefined)?.tests;
  const ok =
    body.code === FAILURE_CODES.pipelineFailed &&
    Array.isArray(failed) &&
    Array.isArray(tests) &&
    failed.length <= tests.length &&
    failed.every((name, i) => typeof name === 'string' && tests.includes(name) && failed.indexOf(name) === i);
  if (!ok) {
    throw badRequest('The failed test pipelines are not tests of this run.', [
      'body.body.failedPipelines: with code pipeline-failed, the test pipelines of the run that failed, each once',
    ]);
  }
  return failed as string[];
}

/**
 * Applies an agent's report to its run, in the transaction that records the report. A report on a run
 * that has finished (a force-cancelled one) changes nothing: it cannot revive the run.
 */
export async function applyAgentReport(trx: Executor, { work, report }: { work: AgentWork; report: AgentReport }): Promise<void> {
  const run = await executionOfWork(trx, work.id);
  if (!run || isFinal(run.status as ExecutionStatus)) return;
  const body = (report.body ?? {}) as ReportBody;
  if (report.type === 'progress' && isStep(body.step)) {
    const step = body.step;
    const pipelineName = await pipelineOfStep(trx, work, run, step);
    await recordStep(trx, run.id, step);
    // The datasets the step read and wrote, and the child pipelines' runs, as OpenLineage events of this
    // execution (the run's, not the report's, ids).
    const { lineage } = step as { lineage?: unknown };
    if (lineage !== undefined || step.childPipeline !== undefined || step.runsPipeline !== undefined) {
      await recordStepLineage(
        trx,
        {
          accountId: run.accountId,
          projectId: run.projectId,
          executionId: run.id,
          rootJobName: rootJobOf(run),
          // A child pipeline's step is a step of that pipeline's job (one the run holds: pipelineOfStep).
          pipelineName,
          step,
        },
        lineage,
      );
    }
  }
  // A report that resolves UNKNOWN also clears its "out of contact" message.
  const message = typeof body.message === 'string' ? body.message.slice(0, 4000) : run.status === 'UNKNOWN' ? null : undefined;
  const moved = await moveExecution(
    trx,
    run.id,
    eventOf(report),
    { lastReportAt: now(), ...(message !== undefined && { message }) },
    report.type === 'failed' ? failedPipelinesOf(work, body) : undefined,
  );
  const step = body.step;
  if (report.type === 'progress' && isStep(step)) {
    await emit(trx, {
      accountId: moved.accountId,
      type: `${eventPrefix(moved.kind)}.${step.status === 'RUNNING' ? 'step-started' : 'step-finished'}`,
      projectId: moved.projectId,
      subject: `${eventPrefix(moved.kind)}s/${run.id}/steps/${step.index}`,
      data: {
        executionId: run.id,
        step: {
          index: step.index,
          name: step.name,
          status: step.status,
          startedAt: step.startedAt,
          finishedAt: step.finishedAt ?? null,
        },
      },
    });
  }
}

/**
 * A user's cancel. With `force` the run is CANCELLED at once. Otherwise it is CANCELLING until the agent
 * stops it, except that work the agent has not picked up yet is simply withdrawn (CANCELLED at once).
 * A finished run is a 409 (the state table refuses the move).
 */
export async function cancelExecution(trx: Executor, run: ExecutionRow, force: boolean): Promise<ExecutionRow> {
  // A cancel with If-Match whose run moved since its check is a 412, even where the move made it final (409).
  checkExpectedVersion('executions', run.id, Number(run.rowVersion));
  const withdrawn =
    run.agentWorkId !== null && !isFinal(run.status as ExecutionStatus) ? await cancelAgentWork(trx, run.agentWorkId) : undefined;
  const event: ExecutionEvent = force || withdrawn === 'cancelled' ? 'force-cancel' : 'cancel';
  return moveExecution(
    trx,
    run.id,
    event,
    force ? { message: 'Cancelled by a user (forced).' } : { message: 'Cancel requested by a user.' },
  );
}

/**
 * An agent is deleted (with its work): the runs it had not finished end CANCELLED now, in the deleting
 * transaction, rather than waiting for it for ever (UNKNOWN, their executionTag taken). Registered with
 * app.agentDeletion.
 */
export async function endRunsOfDeletedAgent(trx: Executor, agentId: string): Promise<void> {
  for (const run of await unfinishedRuns(trx, { agentId })) {
    await moveExecution(trx, run.id, 'force-cancel', { message: 'Cancelled: the agent running it was deleted.' });
  }
}

/**
 * A project is deleted (its runs with it): the agent work of the runs it had not finished is cancelled, so
 * that the agent stops them (named in its next heartbeat answer; its reports are refused). Registered with
 * app.projectDeletion.
 */
export async function cancelWorkOfDeletedProject(trx: Executor, projectId: string): Promise<void> {
  for (const run of await unfinishedRuns(trx, { projectId })) {
    if (run.agentWorkId !== null) await cancelAgentWork(trx, run.agentWorkId);
  }
}

/**
 * Runs whose agent has been out of contact past `windowMs` become UNKNOWN (a later report resolves
 * them); runs whose work the agents area closed as cancelled (the agent vanished while a cancel was
 * pending), or whose work is gone (its agent was deleted), become CANCELLED. Contact is the agent's last poll or heartbeat, or the run's last report.
 */
export async function sweepExecutions(db: Db, windowMs: number): Promise<number> {
  const cutoff = new Date(Date.now() - windowMs).toISOString();
  // Runs with no report since the cutoff, of agents that have not been in contact since either.
  const quiet = quietRuns(db, cutoff);
  const quietAgents = await quiet.agents();
  const inContact = await agentsInContactSince(db, quietAgents, cutoff);
  const lost = await quiet.ofAgents(quietAgents.filter((agentId) => !inContact.has(agentId)));
  // Runs whose work the agents area closed as cancelled.
  const held = await heldRuns(db);
  const cancelled = await cancelledWorkIds(
    db,
    held.map((row) => row.agentWorkId),
  );
  const gone = await goneWorkIds(
    db,
    held.map((row) => row.agentWorkId),
  );
  const closed = held.filter((row) => cancelled.has(row.agentWorkId) || gone.has(row.agentWorkId)).slice(0, 500);
  const moves: [string, ExecutionEvent, string][] = [
    ...lost.map((row): [string, ExecutionEvent, string] => [
      row.id,
      'lost-contact',
      'The agent has been out of contact; the outcome is not known yet.',
    ]),
    ...closed.map((row): [string, ExecutionEvent, string] => [
      row.id,
      'agent-cancelled',
      gone.has(row.agentWorkId)
        ? 'Cancelled: the agent running it was deleted.'
        : 'Cancelled; the agent stopped holding the run.',
    ]),
  ];
  let moved = 0;
  for (const [id, event, message] of moves) {
    try {
      // In a transaction of its own: the move and its event land together.
      await db.transaction().execute((trx) => moveExecution(trx, id, event, { message }));
      moved += 1;
    } catch (error) {
      // Moved meanwhile by a report (the state table refuses this move now): the report wins.
      if (!(error instanceof IllegalTransition)) throw error;
    }
  }
  return moved;
}
