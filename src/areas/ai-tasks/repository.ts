/** The AI agent tasks' SQL: rows of `aiTasks` and `aiTaskMessages` and nothing else. The rules are the service's (service.ts). */
import type { Selectable } from 'kysely';
import type { Executor, Trx } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import type { TaskMessageData } from './schemas.ts';
import type { AiTaskMessageTable, AiTaskTable } from './tables.ts';

export type TaskRow = AiTaskTable;
export type MessageRow = Selectable<AiTaskMessageTable>;

/** Inserts a task. */
export async function insertTask(trx: Trx, row: TaskRow): Promise<void> {
  await trx.insertInto('aiTasks').values(row).execute();
}

/** Task `taskId` of the account. */
export function findTask(db: Executor, accountId: string, taskId: string): Promise<TaskRow | undefined> {
  return db.selectFrom('aiTasks').selectAll().where('id', '=', taskId).where('accountId', '=', accountId).executeTakeFirst();
}

/**
 * Changes the task row (at least its updatedAt) and answers it as it now is. Doing so first in a
 * transaction holds the task's row for the rest of it, which serialises every writer of one task, so
 * that its messages are numbered in the order their transactions commit.
 */
export async function updateTask(trx: Trx, taskId: string, changes: Partial<TaskRow> = {}): Promise<TaskRow> {
  return trx
    .updateTable('aiTasks')
    .set({ ...changes, updatedAt: now() })
    .where('id', '=', taskId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Writes the task's new status (and other changes) if its status is one of `from` (compare and set): the row as it now is, or undefined. */
export function updateTaskStatus(
  trx: Trx,
  taskId: string,
  from: readonly string[],
  changes: Partial<TaskRow> & Pick<TaskRow, 'status' | 'statusDetail'>,
): Promise<TaskRow | undefined> {
  return trx
    .updateTable('aiTasks')
    .set({ ...changes, updatedAt: now() })
    .where('id', '=', taskId)
    .where('status', 'in', [...from])
    .returningAll()
    .executeTakeFirst();
}

/** The status of task `taskId` (one that exists). */
export async function taskStatus(trx: Trx, taskId: string): Promise<string> {
  const row = await trx.selectFrom('aiTasks').select('status').where('id', '=', taskId).executeTakeFirstOrThrow();
  return row.status;
}

/** Adds messages to the conversation, in order, under one group. Call it after updateTask() or a status move in the transaction. */
export async function appendMessages(trx: Trx, taskId: string, groupId: string, messages: TaskMessageData[]): Promise<void> {
  if (messages.length === 0) return;
  const createdAt = now();
  await trx
    .insertInto('aiTaskMessages')
    .values(messages.map((data) => ({ taskId, groupId, data: JSON.stringify(data), createdAt })))
    .execute();
}

/** Up to `limit` of the task's messages after message `afterId`, in order. */
export function messageRowsAfter(db: Executor, taskId: string, afterId: number, limit: number): Promise<MessageRow[]> {
  return db
    .selectFrom('aiTaskMessages')
    .selectAll()
    .where('taskId', '=', taskId)
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute();
}

/** All the task's messages, in order. */
export function messageRowsOf(db: Executor, taskId: string): Promise<MessageRow[]> {
  return db.selectFrom('aiTaskMessages').selectAll().where('taskId', '=', taskId).orderBy('id').execute();
}
