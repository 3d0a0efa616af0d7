/**
 * The runs' rules: a run is created with the agent work that carries it and announced in one transaction;
 * every status change goes through the state table (moveExecution); how runs and steps are shown. The SQL
 * is the repository's; how a started run moves (reports, cancels, lost agents) is lifecycle.ts.
 */
import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound } from '../../core/problems.ts';
import type { PageQuery } from '../../core/paging.ts';
import { keyOf, tokenPageOf } from '../../core/token-paging.ts';
import { emit } from '../../core/outbox.ts';
import { enqueueAgentWork } from '../agents/index.ts';
import { recordRunEnd, recordRunStart } from '../lineage/index.ts';
import { WORK_KINDS, type ExecutionPayload } from '../../contract/work.ts';
import { isFinal, moveOf, type ExecutionEvent, type ExecutionStatus } from './states.ts';
import {
  TRIGGERS,
  type ExecutionStep,
  type ListExecutionsQuery,
  type PipelineExecutionSummary,
  type Trigger,
} from './schemas.ts';
import type { PreparedRun } from './run-start.ts';
import {
  closeOpenSteps,
  executionRow,
  findExecution,
  insertExecution,
  pipelineRunRows,
  setExecutionIf,
  setExecutionWork,
  stepRows,
  upsertStep,
  type ExecutionKind,
  type ExecutionRow,
} from './repository.ts';

export type { ExecutionKind, ExecutionRow } from './repository.ts';
export const AGENT_WORK_KINDS = { PIPELINE: WORK_KINDS.executePipeline, TEST: WORK_KINDS.executeTests } as const;

/** What events about a run of `kind` are called: `pipeline-execution.finished`, `test-execution.started`. */
export function eventPrefix(kind: string): string {
  return kind === 'TEST' ? 'test-execution' : 'pipeline-execution';
}

/** A run's job in lineage: its pipeline (a test run's test, or `(tests)` for a run of several). */
export function rootJobOf(run: { pipelineName: string | null; testName: string | null }): string {
  return run.pipelineName ?? run.testName ?? '(tests)';
}

/**
 * Creates the run (RUNNING) and the agent work that carries it, in the caller's transaction. A second
 * running execution of the project with the same executionTag is a 409.
 */
export async function createExecution(
  trx: Executor,
  kind: ExecutionKind,
  run: PreparedRun,
  fields: { pipelineName: string | null; executionTag?: string; testScope?: string; testName?: string | null; tests?: string[] },
): Promise<string> {
  const id = randomUUID();
  const status = moveOf('(none)', 'start');
  const startedAt = now();
  try {
    await insertExecution(trx, {
      id,
      accountId: run.request.accountId,
      projectId: run.request.projectId,
      environmentId: run.environment.id,
      environmentName: run.environment.name,
      kind,
      pipelineName: fields.pipelineName,
      testScope: fields.testScope ?? null,
      testName: fields.testName ?? null,
      versionName: run.versionName,
      agentId: run.agentId,
      agentType: run.agentType,
      agentWorkId: null,
      executionTag: fields.executionTag ?? null,
      runningTag: fields.executionTag ?? null,
      trigger: run.request.trigger,
      scheduleId: run.request.scheduleId ?? null,
      scheduledFor: run.request.scheduledFor ?? null,
      status,
      message: null,
      variables: JSON.stringify(run.variables),
      startedAt,
      finishedAt: null,
      lastReportAt: null,
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`Another execution tagged "${fields.executionTag}" is running in this project.`);
    throw error;
  }
  // The run's START in lineage (its end comes with its last move: moveExecution).
  await recordRunStart(trx, {
    accountId: run.request.accountId,
    projectId: run.request.projectId,
    executionId: id,
    jobName: rootJobOf({ pipelineName: fields.pipelineName, testName: fields.testName ?? null }),
    startedAt,
  });
  const payload: ExecutionPayload = {
    executionId: id,
    pipelines: run.pipelines,
    variables: run.variables,
    ...(fields.pipelineName !== null && kind === 'PIPELINE' && { pipelineName: fields.pipelineName }),
    ...(fields.tests && { tests: fields.tests }),
    accountId: run.request.accountId,
    environmentId: run.environment.id,
    ...(run.warehouse && { warehouse: run.warehouse }),
  };
  const agentWorkId = await enqueueAgentWork(trx, {
    accountId: run.request.accountId,
    agentId: run.agentId,
    kind: AGENT_WORK_KINDS[kind],
    payload,
  });
  await setExecutionWork(trx, id, agentWorkId);
  await emit(trx, {
    accountId: run.request.accountId,
    type: `${eventPrefix(kind)}.started`,
    projectId: run.request.projectId,
    subject: `${eventPrefix(kind)}s/${id}`,
    data: {
      executionId: id,
      status,
      pipelineName: fields.pipelineName,
      environmentName: run.environment.name,
      trigger: run.request.trigger,
      ...(fields.executionTag !== undefined && { executionTag: fields.executionTag }),
    },
  });
  return id;
}

/**
 * A scheduled run that was declined (the schedule's previous run still going, or nothing runnable at the
 * due time): recorded SKIPPED with the reason, never handed to an agent. What was not resolved is empty.
 */
export async function recordSkippedRun(
  trx: Executor,
  run: {
    accountId: string;
    projectId: string;
    environmentId: string;
    environmentName: string;
    pipelineName: string;
    scheduleId: string;
    scheduledFor: string;
    versionName?: string;
    agentId?: string;
  },
  message: string,
): Promise<string> {
  const id = randomUUID();
  const at = now();
  const status = moveOf('(none)', 'decline');
  await insertExecution(trx, {
    id,
    accountId: run.accountId,
    projectId: run.projectId,
    environmentId: run.environmentId,
    environmentName: run.environmentName,
    kind: 'PIPELINE',
    pipelineName: run.pipelineName,
    testScope: null,
    testName: null,
    versionName: run.versionName ?? '',
    agentId: run.agentId ?? '',
    agentWorkId: null,
    executionTag: null,
    runningTag: null,
    trigger: 'SCHEDULE',
    scheduleId: run.scheduleId,
    scheduledFor: run.scheduledFor,
    status,
    message,
    variables: '{}',
    startedAt: at,
    finishedAt: at,
    lastReportAt: null,
  });
  await emit(trx, {
    accountId: run.accountId,
    type: 'pipeline-execution.finished',
    projectId: run.projectId,
    subject: `pipeline-executions/${id}`,
    data: {
      executionId: id,
      status,
      pipelineName: run.pipelineName,
      environmentName: run.environmentName,
      trigger: 'SCHEDULE',
      message,
    },
  });
  return id;
}

/** Run `id` of kind `kind` in the caller's project, or a 404. */
export async function requireExecution(db: Executor, accountId: string, projectId: string, id: string, kind: ExecutionKind) {
  const row = await findExecution(db, accountId, projectId, id, kind);
  if (!row) throw notFound(`${kind === 'PIPELINE' ? 'Pipeline' : 'Test'} execution ${id} does not exist in this project.`);
  return row;
}

/**
 * THE one place a run's status changes: the state table decides where `event` leads from the status
 * the row has (IllegalTransition, a 409, when nowhere), and the update only lands if the row still has
 * that status (a concurrent move makes it re-read and decide again). Answers the row as moved.
 */
export async function moveExecution(
  db: Executor,
  id: string,
  event: ExecutionEvent,
  changes: { message?: string | null; lastReportAt?: string } = {},
  /** A failed test run's test pipelines that failed, each having run to its end (the others passed). */
  failedPipelines?: string[],
): Promise<ExecutionRow> {
  for (;;) {
    const row = await executionRow(db, id);
    const from = row.status as ExecutionStatus;
    const to = moveOf(from, event);
    const finished = isFinal(to);
    const set = {
      status: to,
      ...changes,
      ...(finished && { finishedAt: now(), runningTag: null }),
    };
    if (!(await setExecutionIf(db, id, from, set))) continue;
    // A step left open when the run ends (its last report refused once the run was cancelling) ends with the run.
    if (finished) await closeOpenSteps(db, id, to === 'SUCCESS' || to === 'CANCELLED' ? to : 'FAILED', set.finishedAt!);
    // Its end in lineage, with the child pipelines' runs it leaves open.
    if (finished && from !== to) {
      await recordRunEnd(db, {
        accountId: row.accountId,
        projectId: row.projectId,
        executionId: id,
        jobName: rootJobOf(row),
        status: to,
        startedAt: row.startedAt,
        finishedAt: set.finishedAt!,
        ...(to === 'FAILED' && failedPipelines && { failedPipelines }),
      });
    }
    if (to !== from) {
      await emit(db, {
        accountId: row.accountId,
        type: `${eventPrefix(row.kind)}.${finished ? 'finished' : 'status-changed'}`,
        projectId: row.projectId,
        subject: `${eventPrefix(row.kind)}s/${id}`,
        data: {
          executionId: id,
          status: to,
          previousStatus: from,
          pipelineName: row.pipelineName,
          environmentName: row.environmentName,
          message: set.message ?? row.message,
          ...(finished && { finishedAt: set.finishedAt }),
        },
      });
    }
    return { ...row, ...set };
  }
}

/** A step of a run as the agent reports it. */
export interface ReportedStep {
  index: number;
  name: string;
  status: string;
  startedAt: string;
  finishedAt?: string;
  message?: string;
  childPipeline?: string;
  /** A child pipeline's step: the index of the step that runs that pipeline. */
  parentStep?: number;
  /** A step that runs a child pipeline: that pipeline. */
  runsPipeline?: string;
  /** Rows the step's SQL wrote, where the agent's warehouse told it. */
  rowsWritten?: unknown;
}

/**
 * Rows one step may report at most: 2^48 (2.8 × 10^14), far past any statement's count, and small enough that
 * consumption's sums of real counts stay exact as JavaScript numbers (below 2^53).
 */
const MAX_STEP_ROWS = 2 ** 48;

/** The rows a step reports it wrote: a count, or nothing (not known); 400 naming the field otherwise. */
function rowsWrittenOf(value: unknown): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= MAX_STEP_ROWS) return value;
  throw badRequest('The step is not valid.', [
    `body.body.step.rowsWritten: must be a whole number of rows, 0 to ${MAX_STEP_ROWS}`,
  ]);
}

/** Records a step the agent reported; a repeated report of a step updates it. */
export async function recordStep(db: Executor, executionId: string, step: ReportedStep): Promise<void> {
  const rowsWritten = rowsWrittenOf(step.rowsWritten);
  await upsertStep(db, {
    rowsWritten,
    executionId,
    position: step.index,
    name: step.name,
    status: step.status,
    startedAt: step.startedAt,
    finishedAt: step.finishedAt ?? null,
    message: step.message ?? null,
    childPipeline: step.childPipeline ?? null,
    runsPipeline: step.runsPipeline ?? null,
  });
}

export async function listSteps(
  db: Executor,
  executionId: string,
  query: PageQuery,
): Promise<{ results: ExecutionStep[]; total: number }> {
  const { rows, total } = await stepRows(db, executionId, query);
  return {
    results: rows.map((row) => ({
      id: String(row.position),
      name: row.name,
      result: {
        status: row.status,
        startedAt: row.startedAt,
        finishedAt: row.finishedAt,
        message: row.message,
        rowsWritten: row.rowsWritten === null ? null : Number(row.rowsWritten),
      },
      childPipeline: row.childPipeline === null ? null : { name: row.childPipeline },
    })),
    total,
  };
}

/** The stored trigger as the vendor names it: runs stored before it was API read MANUAL. */
export function triggerOf(stored: string): Trigger {
  if (stored === 'MANUAL') return 'API';
  return (TRIGGERS as readonly string[]).includes(stored) ? (stored as Trigger) : 'UNKNOWN';
}

export function toSummary(row: ExecutionRow): PipelineExecutionSummary {
  return {
    pipelineExecutionId: row.id,
    pipelineName: row.pipelineName ?? '',
    status: row.status as ExecutionStatus,
    startedAt: row.startedAt,
    finishedAt: row.finishedAt,
    environmentName: row.environmentName,
    projectId: row.projectId,
    pipelineType: 'ORCHESTRATION',
    trigger: triggerOf(row.trigger),
    scheduleId: row.scheduleId,
    message: row.message,
  };
}

/** A page of the account's pipeline executions, newest first, with the token of the next page. */
export async function listExecutions(db: Executor, accountId: string, query: ListExecutionsQuery) {
  const after = keyOf<[string, string]>(query.paginationToken, ['string', 'string']);
  const rows = await pipelineRunRows(db, accountId, query, after, query.limit + 1);
  // The token is where the page ended in (startedAt, id) descending order.
  return tokenPageOf(rows, query.limit, (row) => [row.startedAt, row.id], toSummary);
}
