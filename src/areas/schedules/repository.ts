/** The schedules' SQL: rows of `schedules` and nothing else. The rules are the service's (service.ts). */
import type { Executor } from '../../core/db/database.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { ScheduleTable } from './tables.ts';

/** What an update may change. */
export type ScheduleChanges = Pick<
  ScheduleTable,
  'name' | 'pipelineName' | 'cronExpression' | 'timezone' | 'enabled' | 'environmentId'
> &
  Partial<Pick<ScheduleTable, 'nextRunAt'>>;

/** Inserts a schedule. A name taken in the project is a unique violation. */
export async function insertSchedule(db: Executor, row: ScheduleTable): Promise<void> {
  await db.insertInto('schedules').values(row).execute();
}

export function findSchedule(db: Executor, projectId: string, id: string): Promise<ScheduleTable | undefined> {
  return db.selectFrom('schedules').selectAll().where('id', '=', id).where('projectId', '=', projectId).executeTakeFirst();
}

/**
 * Writes an update's changes, one version on. A name taken in the project is a unique violation. Where the
 * request's If-Match check saw a version of this row, only that version is changed (a 412 when another write
 * came between).
 */
export async function updateScheduleRow(db: Executor, id: string, changes: ScheduleChanges): Promise<void> {
  const expected = expectedRowVersion('schedules', id);
  let update = db
    .updateTable('schedules')
    .set({ ...changes, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', id);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('schedules', id, result.numUpdatedRows > 0n);
}

/** Deletes the project's schedule; whether there was one. As updateScheduleRow for If-Match. */
export async function deleteScheduleRow(db: Executor, projectId: string, id: string): Promise<boolean> {
  const expected = expectedRowVersion('schedules', id);
  let deletion = db.deleteFrom('schedules').where('id', '=', id).where('projectId', '=', projectId);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('schedules', id, result.numDeletedRows > 0n);
  return result.numDeletedRows > 0n;
}

/** A page of the project's schedules, by name, and how many it has. */
export async function listScheduleRows(db: Executor, projectId: string, query: PageQuery) {
  const inProject = db.selectFrom('schedules').where('projectId', '=', projectId);
  const [rows, total] = await Promise.all([
    inProject.selectAll().orderBy('name').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(inProject),
  ]);
  return { rows, total };
}

/** Up to `limit` enabled schedules due at `at`, the earliest first. */
export function dueSchedules(db: Executor, at: string, limit: number): Promise<ScheduleTable[]> {
  return db
    .selectFrom('schedules')
    .selectAll()
    .where('enabled', '=', 1)
    .where('nextRunAt', '<=', at)
    .orderBy('nextRunAt')
    .limit(limit)
    .execute();
}

/**
 * Moves the schedule's next due time on from `from` to `to` (compare and set): whether this call moved it,
 * false when another instance did first or the schedule was disabled meanwhile. A schedule answers its next due
 * time (nextRunAt), so its version moves too: a write with If-Match whose check saw the earlier time is a 412.
 */
export async function moveNextRun(db: Executor, id: string, from: string, to: string | null): Promise<boolean> {
  const moved = await db
    .updateTable('schedules')
    .set({ nextRunAt: to, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', id)
    .where('nextRunAt', '=', from)
    .where('enabled', '=', 1)
    .executeTakeFirst();
  return moved.numUpdatedRows > 0n;
}
