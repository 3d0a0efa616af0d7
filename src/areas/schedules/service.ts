/**
 * The schedules' rules: a cron expression read in its IANA time zone, the next due time, unique names, and
 * the ticker that starts due runs once per due time across instances. The SQL is the repository's.
 */
import { randomUUID } from 'node:crypto';
import { Cron } from 'croner';
import type { Db, Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound, ProblemError } from '../../core/problems.ts';
import type { PageQuery } from '../../core/paging.ts';
import { createExecution, hasUnfinishedRun, preparePipelineRun, recordSkippedRun } from '../executions/index.ts';
import { accountsOfProjects } from '../projects/index.ts';
import { environmentNamesById, requireEnvironmentId } from '../environments/index.ts';
import type { ScheduleTable } from './tables.ts';
import type { CreateScheduleRequest, Schedule, ScheduleSummary, UpdateScheduleRequest } from './schemas.ts';
import {
  deleteScheduleRow,
  dueSchedules,
  findSchedule,
  insertSchedule,
  listScheduleRows,
  moveNextRun,
  updateScheduleRow,
} from './repository.ts';

type ScheduleRow = ScheduleTable & { environmentName: string };

/** How many due schedules one tick starts at most (the next tick takes the rest). */
const DUE_PER_TICK = 100;

/** The cron expression read in its time zone, or a 400 naming what is wrong. */
function cronOf(expression: string, timezone: string): Cron {
  const violations: string[] = [];
  try {
    new Intl.DateTimeFormat('en', { timeZone: timezone });
  } catch {
    violations.push(`timezone: "${timezone}" is not an IANA time zone`);
  }
  let cron: Cron | undefined;
  try {
    cron = new Cron(expression, { paused: true, ...(violations.length === 0 && { timezone }) });
  } catch (error) {
    violations.push(`cronExpression: ${(error as Error).message}`);
  }
  if (violations.length > 0 || !cron) throw badRequest('The schedule cannot be read.', violations);
  return cron;
}

/** The first due time after `after`, or null (disabled, or an expression that never fires again). */
function nextDue(row: Pick<ScheduleTable, 'cronExpression' | 'timezone' | 'enabled'>, after: Date): string | null {
  if (row.enabled !== 1) return null;
  return cronOf(row.cronExpression, row.timezone).nextRun(after)?.toISOString() ?? null;
}

function toSchedule(row: ScheduleRow): Schedule {
  return {
    scheduleId: row.id,
    name: row.name,
    pipelineName: row.pipelineName,
    cronExpression: row.cronExpression,
    scheduleEnabled: row.enabled === 1,
    environmentName: row.environmentName,
    timezone: row.timezone,
    nextRunAt: row.nextRunAt,
    createdAt: row.createdAt,
  };
}

/** Schedules with the names of their environments (read through the environments area). */
async function withEnvironmentNames(db: Executor, rows: ScheduleTable[]): Promise<ScheduleRow[]> {
  const names = await environmentNamesById(
    db,
    rows.map((row) => row.environmentId),
  );
  return rows.flatMap((row) => {
    const environmentName = names.get(row.environmentId);
    return environmentName === undefined ? [] : [{ ...row, environmentName }];
  });
}

const nameTaken = (name: string) => conflict(`A schedule named "${name}" already exists in this project.`);
const missing = (id: string) => notFound(`Schedule ${id} does not exist in this project.`);

/** Runs `write`, answering a unique violation (a schedule's only unique column in its project is its name) as 409. */
async function withUniqueName(name: string, write: () => Promise<void>): Promise<void> {
  try {
    await write();
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(name);
    throw error;
  }
}

export async function createSchedule(db: Executor, projectId: string, request: CreateScheduleRequest): Promise<Schedule> {
  const timezone = request.timezone ?? 'UTC';
  cronOf(request.cronExpression, timezone);
  const environmentId = await requireEnvironmentId(db, projectId, request.environmentName);
  const enabled = request.scheduleEnabled === false ? 0 : 1;
  const row: ScheduleTable = {
    id: randomUUID(),
    projectId,
    environmentId,
    name: request.name,
    pipelineName: request.pipelineName,
    cronExpression: request.cronExpression,
    timezone,
    enabled,
    nextRunAt: nextDue({ cronExpression: request.cronExpression, timezone, enabled }, new Date()),
    createdAt: now(),
  };
  await withUniqueName(request.name, () => insertSchedule(db, row));
  return toSchedule({ ...row, environmentName: request.environmentName });
}

async function requireSchedule(db: Executor, projectId: string, id: string): Promise<ScheduleRow> {
  const found = await findSchedule(db, projectId, id);
  const [row] = found ? await withEnvironmentNames(db, [found]) : [];
  if (!row) throw missing(id);
  return row;
}

export async function getSchedule(db: Executor, projectId: string, id: string): Promise<Schedule> {
  return toSchedule(await requireSchedule(db, projectId, id));
}

/** Partial update; a change of expression, time zone or enabling recomputes the next due time from now. */
export async function updateSchedule(
  db: Executor,
  projectId: string,
  id: string,
  request: UpdateScheduleRequest,
): Promise<Schedule> {
  const current = await requireSchedule(db, projectId, id);
  const environmentId =
    request.environmentName === undefined
      ? current.environmentId
      : await requireEnvironmentId(db, projectId, request.environmentName);
  const next = {
    name: request.name ?? current.name,
    pipelineName: request.pipelineName ?? current.pipelineName,
    cronExpression: request.cronExpression ?? current.cronExpression,
    timezone: request.timezone ?? current.timezone,
    enabled: request.scheduleEnabled === undefined ? current.enabled : request.scheduleEnabled ? 1 : 0,
    environmentId,
  };
  const timing =
    next.cronExpression !== current.cronExpression || next.timezone !== current.timezone || next.enabled !== current.enabled;
  if (!timing) cronOf(next.cronExpression, next.timezone);
  // Without a change of timing the due time is left as it is in the row: the scheduler may have moved it on
  // since `current` was read, and writing the read one back would undo that.
  const changes = timing ? { ...next, nextRunAt: nextDue(next, new Date()) } : next;
  await withUniqueName(next.name, () => updateScheduleRow(db, id, changes));
  return getSchedule(db, projectId, id);
}

export async function deleteSchedule(db: Executor, projectId: string, id: string): Promise<void> {
  if (!(await deleteScheduleRow(db, projectId, id))) throw missing(id);
}

export async function listSchedules(
  db: Executor,
  projectId: string,
  query: PageQuery,
): Promise<{ results: ScheduleSummary[]; total: number }> {
  const { rows, total } = await listScheduleRows(db, projectId, query);
  return {
    results: (await withEnvironmentNames(db, rows)).map((row) => {
      const { scheduleId, name, pipelineName, cronExpression, scheduleEnabled, environmentName } = toSchedule(row);
      return { scheduleId, name, pipelineName, cronExpression, scheduleEnabled, environmentName };
    }),
    total,
  };
}

/**
 * Starts the runs of every due schedule, once per due time across all instances: the instance whose
 * update moves the schedule's nextRunAt on from the due time it read (compare and set, in the transaction
 * that creates the run) starts it; the others find it moved and do nothing. The next due time is
 * computed from now, so however many due times passed while no server ran, a schedule starts at most one
 * run, and only when its latest due time is within `catchUpMs`. A run is SKIPPED (recorded, not run)
 * while the schedule's previous run is still going, or when nothing can run at the due time.
 */
export async function runDueSchedules(db: Db, catchUpMs: number, hostedAgent = false): Promise<number> {
  const at = new Date();
  const due = await withEnvironmentNames(db, await dueSchedules(db, at.toISOString(), DUE_PER_TICK));
  const accounts = await accountsOfProjects(
    db,
    due.map((row) => row.projectId),
  );
  let started = 0;
  for (const row of due) {
    const accountId = accounts.get(row.projectId);
    if (accountId === undefined) continue;
    const schedule = { ...row, accountId };
    // Due rows have a next run time (dueSchedules selects them by it).
    const dueAt = schedule.nextRunAt as string;
    const cron = cronOf(schedule.cronExpression, schedule.timezone);
    const latest = cron.previousRuns(1, new Date(at.getTime() + 1))[0] ?? new Date(dueAt);
    const runNow = at.getTime() - latest.getTime() <= catchUpMs;
    const base = {
      accountId: schedule.accountId,
      projectId: schedule.projectId,
      environmentId: schedule.environmentId,
      environmentName: schedule.environmentName,
      pipelineName: schedule.pipelineName,
      scheduleId: schedule.id,
      scheduledFor: latest.toISOString(),
    };
    // Read outside the transaction (it parses the pipeline file); a refusal is the reason the run is skipped.
    const prepared = runNow
      ? await preparePipelineRun(db, { ...base, trigger: 'SCHEDULE', hostedAgent }).catch((error: unknown) => {
          if (error instanceof ProblemError) return error;
          throw error;
        })
      : undefined;
    const claimed = await db
      .transaction()
      .execute(async (trx) => {
        const moved = await moveNextRun(trx, schedule.id, dueAt, cron.nextRun(at)?.toISOString() ?? null);
        if (!moved || prepared === undefined) return false;
        if (await hasUnfinishedRun(trx, schedule.id)) {
          await recordSkippedRun(trx, base, "Skipped: the schedule's previous run is still going.");
        } else if (prepared instanceof ProblemError) {
          await recordSkippedRun(trx, base, `Skipped: ${prepared.message}`);
        } else {
          await createExecution(trx, 'PIPELINE', prepared, { pipelineName: prepared.pipelineName });
        }
        return true;
      })
      .catch((error: unknown) => {
        // The due time already has its run (the unique key of schedule and due time): another instance won.
        if (isUniqueViolation(error)) return false;
        throw error;
      });
    if (claimed) started += 1;
  }
  return started;
}
