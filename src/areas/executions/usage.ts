import { sql } from 'kysely';
import type { Dialect, Executor } from '../../core/db/database.ts';
import type { ExecutionStatus } from './states.ts';

/** The runs that did work: a SKIPPED or FORBIDDEN run ran nothing, and an unfinished one is counted when it ends. */
export const WORKING_STATUSES: readonly ExecutionStatus[] = ['SUCCESS', 'FAILED', 'CANCELLED'];

/** Finished runs of one day, project, environment, agent and pipeline: the finest grain usage is read at. */
export interface UsageRow {
  /** The UTC day the runs started, YYYY-MM-DD. */
  day: string;
  projectId: string;
  environmentName: string;
  agentId: string;
  /** The agent's type when the runs started (what they are priced by); null for runs from before it was kept. */
  agentType: string | null;
  /** The pipeline run; for a test execution, its scope's name (`(tests)` for a whole project's tests). */
  pipelineName: string;
  runs: number;
  failedRuns: number;
  /** Seconds from each run's first report (its agent began it) to its end, summed. */
  runSeconds: number;
  /** Rows the runs' steps wrote where the agent knew it, summed; null when no step of them told. */
  rowsWritten: number | null;
}

/**
 * The account's finished runs that started on the days from `fromDay` to `toDay` (inclusive, UTC), counted
 * once each from the executions table (whatever instance ran or recorded them): those whose agent reported on
 * them, from its first report to their end (a run waiting for an agent does no work).
 */
export async function usageByDay(
  db: Executor,
  dialect: Dialect,
  accountId: string,
  fromDay: string,
  toDay: string,
): Promise<UsageRow[]> {
  const day = sql<string>`substr(started_at, 1, 10)`;
  const seconds =
    dialect === 'postgres'
      ? sql<number>`extract(epoch from (finished_at::timestamptz - coalesce(first_report_at, started_at)::timestamptz))`
      : sql<number>`(julianday(finished_at) - julianday(coalesce(first_report_at, started_at))) * 86400.0`;
  const pipeline = sql<string>`coalesce(pipeline_name, test_name, '(tests)')`;
  // Each run's steps' rows written, summed per run first (a run is one row of the grouping below), for the
  // runs of this account and window only. SQLite's sum() of integers fails past 2^63; total() does not.
  const total = (column: string) =>
    dialect === 'postgres'
      ? sql<string | null>`sum(${sql.ref(column)})`
      : sql<string | null>`case when count(${sql.ref(column)}) = 0 then null else total(${sql.ref(column)}) end`;
  const written = db
    .selectFrom('executionSteps')
    .select(['executionId', total('rows_written').as('rowsWritten')])
    .where('rowsWritten', 'is not', null)
    .where('executionId', 'in', (runs) =>
      runs
        .selectFrom('executions')
        .select('id')
        .where('accountId', '=', accountId)
        .where('startedAt', '>=', fromDay)
        .where('startedAt', '<', `${toDay}~`),
    )
    .groupBy('executionId')
    .as('written');
  const rows = await db
    .selectFrom('executions')
    .leftJoin(written, 'written.executionId', 'executions.id')
    .select([
      day.as('day'),
      'projectId',
      'environmentName',
      'agentId',
      'agentType',
      pipeline.as('pipelineName'),
      sql<string>`count(*)`.as('runs'),
      sql<string>`sum(case when status = 'FAILED' then 1 else 0 end)`.as('failedRuns'),
      sql<string>`sum(${seconds})`.as('runSeconds'),
      total('written.rows_written').as('rowsWritten'),
    ])
    .where('accountId', '=', accountId)
    .where('startedAt', '>=', fromDay)
    // Every ISO time of the last day sorts before the next character after its date.
    .where('startedAt', '<', `${toDay}~`)
    .where('status', 'in', WORKING_STATUSES)
    .where('finishedAt', 'is not', null)
    // A run its agent never reported on (cancelled before it was taken, or its agent vanished first) ran nothing.
    .where('lastReportAt', 'is not', null)
    .groupBy([day, 'projectId', 'environmentName', 'agentId', 'agentType', pipeline])
    .execute();
  return rows.map((row) => ({
    day: row.day,
    projectId: row.projectId,
    environmentName: row.environmentName,
    agentId: row.agentId,
    agentType: row.agentType,
    pipelineName: row.pipelineName,
    runs: Number(row.runs),
    failedRuns: Number(row.failedRuns),
    // Times are kept to the millisecond; SQLite's julianday arithmetic is not exact below that.
    runSeconds: Math.max(0, Math.round(Number(row.runSeconds) * 1000) / 1000),
    rowsWritten: row.rowsWritten === null ? null : Number(row.rowsWritten),
  }));
}
