/**
 * The runs' SQL: rows of `executions` and `executionSteps` and nothing else. The rules (the state table,
 * the agent work a run carries, its events, how it is shown) are the services' (service.ts, lifecycle.ts).
 */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { Insertable, Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { preparedQuery } from '../../core/db/prepared.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import { PIPELINE_SUFFIXES } from '../../contract/pipeline-file.ts';
import type { ExecutionStepTable, ExecutionTable } from './tables.ts';
import { EXECUTION_STATUSES, isFinal } from './states.ts';
import type { ListExecutionsQuery } from './schemas.ts';

export type ExecutionRow = Selectable<ExecutionTable>;
export type ExecutionKind = 'PIPELINE' | 'TEST';

const ORCHESTRATION = PIPELINE_SUFFIXES.orchestration;
const UNFINISHED = EXECUTION_STATUSES.filter((status) => !isFinal(status));

/** Inserts a run. A second running run of the project with the same tag is a unique violation. */
export async function insertExecution(db: Executor, row: Insertable<ExecutionTable>): Promise<void> {
  await db.insertInto('executions').values(row).execute();
}

/** The agent work carrying a run, set in the transaction that inserts it (a run does not answer it: no version on). */
export async function setExecutionWork(db: Executor, id: string, agentWorkId: string): Promise<void> {
  await db.updateTable('executions').set({ agentWorkId }).where('id', '=', id).execute();
}

/** Run `id` of kind `kind` in the account's project, if there is one. */
export function findExecution(db: Executor, accountId: string, projectId: string, id: string, kind: ExecutionKind) {
  return db
    .selectFrom('executions')
    .selectAll()
    .where('id', '=', id)
    .where('projectId', '=', projectId)
    .where('accountId', '=', accountId)
    .where('kind', '=', kind)
    .executeTakeFirst();
}

/** Run `id` (it must exist). */
export function executionRow(db: Executor, id: string): Promise<ExecutionRow> {
  return db.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
}

/** The run that agent work `workId` carries, if any. */
export function executionOfWork(db: Executor, workId: string) {
  return db
    .selectFrom('executions')
    .select(['id', 'status', 'accountId', 'projectId', 'pipelineName', 'testName'])
    .where('agentWorkId', '=', workId)
    .executeTakeFirst();
}

/**
 * Writes `set` to run `id` only while its status is still `from` (compare and set); whether it landed. A change
 * of what a run answers (status, message, finishedAt) is a version on; a report that only renews lastReportAt
 * is not. Where the request's If-Match check saw a version of this row, only that version is changed (a 412
 * when another write came between: core/conditional.ts).
 */
export async function setExecutionIf(
  db: Executor,
  id: string,
  from: string,
  set: Partial<Pick<ExecutionRow, 'status' | 'message' | 'lastReportAt' | 'finishedAt' | 'runningTag'>>,
): Promise<boolean> {
  const answered = (set.status !== undefined && set.status !== from) || set.message !== undefined || set.finishedAt !== undefined;
  const expected = expectedRowVersion('executions', id);
  let update = db
    .updateTable('executions')
    .set((eb) => ({
      ...set,
      // The first report's time is kept: run-seconds count from it (consumption).
      ...(set.lastReportAt !== undefined && { firstReportAt: eb.fn.coalesce('firstReportAt', eb.val(set.lastReportAt)) }),
      rowVersion: answered ? eb('rowVersion', '+', 1) : eb.ref('rowVersion'),
    }))
    .where('id', '=', id)
    .where('status', '=', from);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('executions', id, result.numUpdatedRows > 0n);
  return result.numUpdatedRows > 0n;
}

/** Ends the run's steps still RUNNING with `status`. */
export async function closeOpenSteps(db: Executor, executionId: string, status: string, finishedAt: string): Promise<void> {
  await db
    .updateTable('executionSteps')
    .set({ status, finishedAt })
    .where('executionId', '=', executionId)
    .where('status', '=', 'RUNNING')
    .execute();
}

/** Inserts a step, or updates the one at its position. */
export async function upsertStep(db: Executor, row: Insertable<ExecutionStepTable>): Promise<void> {
  await db
    .insertInto('executionSteps')
    .values(row)
    .onConflict((oc) =>
      oc.columns(['executionId', 'position']).doUpdateSet({
        name: row.name,
        status: row.status,
        startedAt: row.startedAt,
        finishedAt: row.finishedAt,
        message: row.message,
        childPipeline: row.childPipeline,
        rowsWritten: row.rowsWritten,
        // The first pipeline reported for the step stays (a report naming another is refused before this).
        runsPipeline: (eb) => eb.fn.coalesce('executionSteps.runsPipeline', eb.ref('excluded.runsPipeline')),
      }),
    )
    .execute();
}

/**
 * The child pipeline step `position` of the run runs, as first reported: undefined for no such step, null for
 * a step that runs none.
 */
export async function pipelineRunByStep(db: Executor, step: { executionId: string; position: number }) {
  const [row] = await stepRunsPipeline(db, step);
  return row?.runsPipeline;
}

const stepRunsPipeline = preparedQuery((db, step: { executionId: string; position: number }) =>
  db
    .selectFrom('executionSteps')
    .select('runsPipeline')
    .where('executionId', '=', step.executionId)
    .where('position', '=', step.position),
);

/** A page of the run's steps by position, and how many it has. */
export async function stepRows(db: Executor, executionId: string, query: PageQuery) {
  const ofRun = db.selectFrom('executionSteps').where('executionId', '=', executionId);
  const [rows, total] = await Promise.all([
    ofRun.selectAll().orderBy('position').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(ofRun),
  ]);
  return { rows, total };
}

/**
 * Up to `limit` of the account's pipeline runs matching the query, newest first (startedAt, id descending),
 * after the position `after` when given.
 */
export function pipelineRunRows(
  db: Executor,
  accountId: string,
  query: Omit<ListExecutionsQuery, 'limit' | 'paginationToken'>,
  after: [string, string] | undefined,
  limit: number,
): Promise<ExecutionRow[]> {
  let select = db.selectFrom('executions').selectAll().where('accountId', '=', accountId).where('kind', '=', 'PIPELINE');
  if (query.projectId !== undefined) select = select.where('projectId', '=', query.projectId);
  if (query.pipelineName !== undefined) {
    const name = query.pipelineName;
    select = select.where('pipelineName', 'in', name.endsWith(ORCHESTRATION) ? [name] : [name, `${name}${ORCHESTRATION}`]);
  }
  if (query.environmentName !== undefined) select = select.where('environmentName', '=', query.environmentName);
  if (query.status !== undefined) select = select.where('status', '=', query.status);
  if (query.startedAfter !== undefined) select = select.where('startedAt', '>=', new Date(query.startedAfter).toISOString());
  if (query.startedBefore !== undefined) select = select.where('startedAt', '<', new Date(query.startedBefore).toISOString());
  if (query.scheduleId !== undefined) select = select.where('scheduleId', '=', query.scheduleId);
  if (after !== undefined) {
    const [startedAt, id] = after;
    select = select.where((eb) =>
      eb.or([eb('startedAt', '<', startedAt), eb.and([eb('startedAt', '=', startedAt), eb('id', '<', id)])]),
    );
  }
  return select.orderBy('startedAt', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

/** Whether a run that schedule `scheduleId` started has not finished yet. */
export async function hasUnfinishedRun(db: Executor, scheduleId: string): Promise<boolean> {
  const row = await db
    .selectFrom('executions')
    .select('id')
    .where('scheduleId', '=', scheduleId)
    .where('status', 'in', UNFINISHED)
    .limit(1)
    .executeTakeFirst();
  return row !== undefined;
}

/** Running (or cancelling) runs started before `cutoff` with no report since: their agents, and up to 500 of them by agent. */
export function quietRuns(db: Executor, cutoff: string) {
  const quiet = db
    .selectFrom('executions')
    .where('status', 'in', ['RUNNING', 'CANCELLING'])
    .where('startedAt', '<', cutoff)
    .where((eb) => eb.or([eb('lastReportAt', 'is', null), eb('lastReportAt', '<', cutoff)]));
  return {
    agents: async () => (await quiet.select('agentId').distinct().execute()).map((row) => row.agentId),
    ofAgents: async (agentIds: readonly string[]) =>
      agentIds.length === 0 ? [] : quiet.select('id').where('agentId', 'in', agentIds).limit(500).execute(),
  };
}

/** The runs not finished (RUNNING, CANCELLING, UNKNOWN) of an agent or of a project, with the agent work they carry. */
export async function unfinishedRuns(
  db: Executor,
  of: { agentId: string } | { projectId: string },
): Promise<{ id: string; agentWorkId: string | null }[]> {
  return db
    .selectFrom('executions')
    .select(['id', 'agentWorkId'])
    .where('status', 'in', ['RUNNING', 'CANCELLING', 'UNKNOWN'])
    .$if('agentId' in of, (query) => query.where('agentId', '=', (of as { agentId: string }).agentId))
    .$if('projectId' in of, (query) => query.where('projectId', '=', (of as { projectId: string }).projectId))
    .execute();
}

/** Runs cancelling or of unknown outcome, with the agent work they carry. */
export async function heldRuns(db: Executor): Promise<{ id: string; agentWorkId: string }[]> {
  const rows = await db
    .selectFrom('executions')
    .select(['id', 'agentWorkId'])
    .where('status', 'in', ['CANCELLING', 'UNKNOWN'])
    .where('agentWorkId', 'is not', null)
    .execute();
  return rows.map((row) => ({ id: row.id, agentWorkId: row.agentWorkId as string }));
}
