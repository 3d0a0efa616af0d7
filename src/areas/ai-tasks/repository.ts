import { emit } from '../../core/outbox.ts';
import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor, Trx } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import { keyOf, tokenPageOf, type TokenPageQuery } from '../../core/token-paging.ts';
import { refusal, TRANSITIONS, type TaskEvent, type TaskStatus } from './states.ts';
import type { AiTaskMessageTable, AiTaskTable } from './tables.ts';
import type { PendingPermission, Task, TaskMessageData } from './schemas.ts';

export type TaskRow = AiTaskTable;
export type MessageRow = Selectable<AiTaskMessageTable>;

export function grantedOf(row: TaskRow): string[] {
  return JSON.parse(row.grantedPermissions) as string[];
}

export function pendingOf(row: TaskRow): PendingPermission | undefined {
  return row.pendingPermission === null ? undefined : (JSON.parse(row.pendingPermission) as PendingPermission);
}

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

export async function insertTask(trx: Trx, row: TaskRow): Promise<void> {
  await trx.insertInto('aiTasks').values(row).execute();
}

/** The task `taskId` of the caller's account, or a 404: another account's task is answered as a missing one. */
export async function requireTask(db: Executor, accountId: string, taskId: string): Promise<TaskRow> {
  const row = await db
    .selectFrom('aiTasks')
    .selectAll()
    .where('id', '=', taskId)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (!row) throw notFound(`AI agent task ${taskId} does not exist.`);
  return row;
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

/** The one place a task changes status: `event` must be allowed from its current status (else 409), per states.ts. */
export async function moveTask(
  trx: Trx,
  taskId: string,
  event: TaskEvent,
  detail: string | null = null,
  changes: Partial<TaskRow> = {},
): Promise<TaskRow> {
  const { from, to } = TRANSITIONS[event];
  const moved = await trx
    .updateTable('aiTasks')
    .set({ ...changes, status: to, statusDetail: detail, updatedAt: now() })
    .where('id', '=', taskId)
    .where('status', 'in', [...from])
    .returningAll()
    .executeTakeFirst();
  if (!moved) {
    const current = await trx.selectFrom('aiTasks').select('status').where('id', '=', taskId).executeTakeFirstOrThrow();
    throw conflict(refusal(event, current.status as TaskStatus));
  }
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

/** Adds messages to the conversation, in order, under one group. Call it after updateTask()/moveTask() in the transaction. */
export async function appendMessages(trx: Trx, taskId: string, groupId: string, messages: TaskMessageData[]): Promise<void> {
  if (messages.length === 0) return;
  const createdAt = now();
  await trx
    .insertInto('aiTaskMessages')
    .values(messages.map((data) => ({ taskId, groupId, data: JSON.stringify(data), createdAt })))
    .execute();
}

function toMessage(row: MessageRow) {
  return { data: JSON.parse(row.data) as TaskMessageData, groupId: row.groupId, timestamp: row.createdAt };
}

export async function listMessages(db: Executor, taskId: string, query: TokenPageQuery) {
  const rows = await db
    .selectFrom('aiTaskMessages')
    .selectAll()
    .where('taskId', '=', taskId)
    .where('id', '>', keyOf<[number]>(query.paginationToken, ['number'])?.[0] ?? 0)
    .orderBy('id')
    .limit(query.limit + 1)
    .execute();
  return tokenPageOf(rows, query.limit, (row) => [Number(row.id)], toMessage);
}

/** The whole conversation, in order (what the model is shown). */
export async function conversationOf(db: Executor, taskId: string): Promise<(MessageRow & { parsed: TaskMessageData })[]> {
  const rows = await db.selectFrom('aiTaskMessages').selectAll().where('taskId', '=', taskId).orderBy('id').execute();
  return rows.map((row) => ({ ...row, id: Number(row.id), parsed: JSON.parse(row.data) as TaskMessageData }));
}

/** Tool calls of the conversation that have no result yet, in the order the model asked for them. */
export function unansweredCalls(conversation: { groupId: string; parsed: TaskMessageData }[]) {
  const answered = new Set(conversation.filter((m) => m.parsed.type === 'TOOL_RESULT').map((m) => m.parsed.toolCallId));
  return conversation.filter((m) => m.parsed.type === 'TOOL_CALL' && !answered.has(m.parsed.toolCallId));
}

/** Answers every call still without a result with `why` (the user moved on, or the task was stopped). */
export async function answerUnansweredCalls(trx: Trx, taskId: string, why: string): Promise<void> {
  for (const call of unansweredCalls(await conversationOf(trx, taskId))) {
    await appendMessages(trx, taskId, call.groupId, [
      { type: 'TOOL_RESULT', toolCallId: call.parsed.toolCallId, toolName: call.parsed.toolName, error: why },
    ]);
  }
}
