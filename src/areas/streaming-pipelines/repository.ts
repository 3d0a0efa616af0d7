/** The streaming pipelines' SQL: rows of `streamingPipelines` and nothing else. The rules are the service's. */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { countOf, offsetOf } from '../../core/paging.ts';
import { accountOfProject } from '../projects/index.ts';
import type { StreamingPipelineTable } from './tables.ts';
import type { StreamingPipelineQuery, StreamingPipelineStatus } from './schemas.ts';

export type PipelineRow = Selectable<StreamingPipelineTable>;

/** The name of a pipeline that runs on agent `agentId`, if any does. */
export async function nameOfPipelineOn(db: Executor, agentId: string): Promise<string | undefined> {
  const row = await db.selectFrom('streamingPipelines').select('name').where('agentId', '=', agentId).executeTakeFirst();
  return row?.name;
}

/** Pipeline `pipelineId` of the project, if there is one. */
/** The pipeline `pipelineId`, whichever project it is in (the agent's reports name the pipeline only). */
export function findPipelineById(db: Executor, pipelineId: string): Promise<PipelineRow | undefined> {
  return db.selectFrom('streamingPipelines').selectAll().where('id', '=', pipelineId).executeTakeFirst();
}

export function findPipeline(db: Executor, projectId: string, pipelineId: string): Promise<PipelineRow | undefined> {
  return db
    .selectFrom('streamingPipelines')
    .selectAll()
    .where('id', '=', pipelineId)
    .where('projectId', '=', projectId)
    .executeTakeFirst();
}

/** Inserts a pipeline. A name taken in the project is a unique violation. */
export async function insertPipeline(db: Executor, row: PipelineRow): Promise<void> {
  await db.insertInto('streamingPipelines').values(row).execute();
}

/** A page of the project's pipelines (of an agent, in a status), by name, and how many there are. */
export async function listPipelineRows(db: Executor, projectId: string, query: StreamingPipelineQuery) {
  let filtered = db.selectFrom('streamingPipelines').where('projectId', '=', projectId);
  if (query.agentId) filtered = filtered.where('agentId', '=', query.agentId);
  if (query.status) filtered = filtered.where('status', '=', query.status);
  const [rows, total] = await Promise.all([
    filtered.selectAll().orderBy('name').orderBy('id').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(filtered),
  ]);
  return { rows, total };
}

/**
 * Writes a replaced definition, one version on. A name taken in the project is a unique violation. Where the
 * request's If-Match check saw a version of this row, only that version is changed (a 412 when another write
 * came between: core/conditional.ts).
 */
export async function updatePipelineRow(
  db: Executor,
  pipelineId: string,
  changes: Pick<PipelineRow, 'name' | 'agentId' | 'definition'>,
): Promise<void> {
  const expected = expectedRowVersion('streamingPipelines', pipelineId);
  let update = db
    .updateTable('streamingPipelines')
    .set({ ...changes, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', pipelineId);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('streamingPipelines', pipelineId, result.numUpdatedRows > 0n);
}

/** Deletes the pipeline; as updatePipelineRow for If-Match. */
export async function deletePipelineRow(db: Executor, pipelineId: string): Promise<void> {
  const expected = expectedRowVersion('streamingPipelines', pipelineId);
  let deletion = db.deleteFrom('streamingPipelines').where('id', '=', pipelineId);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('streamingPipelines', pipelineId, result.numDeletedRows > 0n);
}

/** Sets the pipeline's status and its message; the pipeline's project and name, if it exists. */
export function setStatus(db: Executor, pipelineId: string, status: StreamingPipelineStatus, message: string | null) {
  return db
    .updateTable('streamingPipelines')
    .set({ status, statusMessage: message, statusChangedAt: now(), rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', pipelineId)
    .returning(['projectId', 'name'])
    .executeTakeFirst();
}

/** Writes `set` only while the pipeline's status is one of `from` (compare and set); whether it landed. */
export async function setStatusIf(
  db: Executor,
  pipelineId: string,
  from: readonly StreamingPipelineStatus[],
  set: Partial<Pick<PipelineRow, 'status' | 'statusMessage' | 'statusChangedAt' | 'progress'>>,
): Promise<boolean> {
  const moved = await db
    .updateTable('streamingPipelines')
    .set({ ...set, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', pipelineId)
    .where('status', 'in', [...from])
    .executeTakeFirst();
  return moved.numUpdatedRows > 0n;
}

/** The pipeline's status, or undefined once it is deleted. */
export async function pipelineStatus(db: Executor, pipelineId: string): Promise<string | undefined> {
  const row = await db.selectFrom('streamingPipelines').select('status').where('id', '=', pipelineId).executeTakeFirst();
  return row?.status;
}

/**
 * Keeps the agent's last progress report (JSON) on the pipeline. Its version stays: the pipeline's answer does
 * not show progress (its status does, whose ETag changes without any version).
 */
export async function setProgress(db: Executor, pipelineId: string, progress: string): Promise<void> {
  await db.updateTable('streamingPipelines').set({ progress }).where('id', '=', pipelineId).execute();
}

/** The account of the pipeline's project, if the project still exists. */
export async function accountOfPipelineProject(db: Executor, projectId: string): Promise<string | null | undefined> {
  const row = await db.selectNoFrom((eb) => accountOfProject(eb, projectId).as('accountId')).executeTakeFirst();
  return row?.accountId;
}
