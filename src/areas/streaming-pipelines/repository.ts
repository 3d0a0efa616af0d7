import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { CREDENTIAL_NAME } from '../../core/credentials.ts';
import { countOf, offsetOf, pageOf, type PageQuery } from '../../core/paging.ts';
import { badRequest, conflict, notFound } from '../../core/problems.ts';
import { cancelAgentWork, enqueueAgentWork, onAgentWorkReport } from '../agents/work.ts';
import type { StreamingPipelineTable } from './tables.ts';
import type { STREAMING_STATUSES, StreamingPipeline, StreamingPipelineRequest } from './schemas.ts';

type Row = Selectable<StreamingPipelineTable>;
type Status = (typeof STREAMING_STATUSES)[number];

/** The kind of agent work that runs a streaming pipeline: it lasts from the start until the stop (its cancellation). */
export const RUN_STREAMING_PIPELINE = 'start-streaming-pipeline';

/**
 * The moves of a streaming pipeline's status, all of them: what starts, stops or ends a run, from where.
 * Anything else is refused (409) or, for an agent's late report, ignored.
 */
const MOVES: Record<string, { from: Status[]; to: Status }> = {
  start: { from: ['STOPPED', 'FAILED'], to: 'STARTING' },
  stop: { from: ['STARTING', 'RUNNING'], to: 'STOPPING' },
  'stopped before delivery': { from: ['STOPPING'], to: 'STOPPED' },
  'agent reports running': { from: ['STARTING'], to: 'RUNNING' },
  'agent reports done': { from: ['STARTING', 'RUNNING', 'STOPPING'], to: 'STOPPED' },
  'agent reports failure': { from: ['STARTING', 'RUNNING'], to: 'FAILED' },
  'agent reports stopped': { from: ['STOPPING'], to: 'STOPPED' },
};
const EDITABLE: Status[] = ['STOPPED', 'FAILED'];

function toStreamingPipeline(row: Row): StreamingPipeline {
  const definition = JSON.parse(row.definition) as Pick<
    StreamingPipeline,
    'streamingSource' | 'streamingTarget' | 'advancedProperties'
  >;
  return {
    streamingPipelineId: row.id,
    projectId: row.projectId,
    name: row.name,
    agentId: row.agentId,
    ...definition,
    status: row.status as Status,
    ...(row.statusMessage !== null && { statusMessage: row.statusMessage }),
  };
}

/** Plain credentials where properties are kept (JDBC and advanced properties), and an agent that is not the account's. */
async function checkDefinition(db: Executor, accountId: string, request: StreamingPipelineRequest): Promise<void> {
  const violations: string[] = [];
  const properties = {
    'streamingSource.connection.jdbcProperties': request.streamingSource.connection.jdbcProperties,
    advancedProperties: request.advancedProperties,
  };
  for (const [at, values] of Object.entries(properties)) {
    for (const key of Object.keys(values ?? {})) {
      if (CREDENTIAL_NAME.test(key))
        violations.push(`${at}.${key}: a definition holds no credential: give it as a secret reference (password, accountKey)`);
    }
  }
  const agent = await db
    .selectFrom('agents')
    .select('id')
    .where('id', '=', request.agentId)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (!agent) violations.push(`agentId: no agent ${request.agentId} in this account`);
  if (violations.length > 0) throw badRequest('The streaming pipeline definition is not valid.', violations);
}

function definitionOf(request: StreamingPipelineRequest): string {
  return JSON.stringify({
    streamingSource: request.streamingSource,
    streamingTarget: request.streamingTarget,
    advancedProperties: request.advancedProperties ?? {},
  });
}

const nameTaken = (name: string) => conflict(`A streaming pipeline named "${name}" already exists in this project.`);

export async function createStreamingPipeline(
  db: Executor,
  accountId: string,
  projectId: string,
  request: StreamingPipelineRequest,
) {
  await checkDefinition(db, accountId, request);
  const id = randomUUID();
  const at = now();
  try {
    await db
      .insertInto('streamingPipelines')
      .values({
        id,
        accountId,
        projectId,
        agentId: request.agentId,
        name: request.name,
        definition: definitionOf(request),
        status: 'STOPPED',
        workId: null,
        statusMessage: null,
        createdAt: at,
        updatedAt: at,
      })
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(request.name);
    throw error;
  }
  return requireStreamingPipeline(db, projectId, id);
}

async function requireRow(db: Executor, projectId: string, id: string): Promise<Row> {
  const row = await db
    .selectFrom('streamingPipelines')
    .selectAll()
    .where('id', '=', id)
    .where('projectId', '=', projectId)
    .executeTakeFirst();
  if (!row) throw notFound(`Streaming pipeline ${id} does not exist in this project.`);
  return row;
}

export async function requireStreamingPipeline(db: Executor, projectId: string, id: string): Promise<StreamingPipeline> {
  return toStreamingPipeline(await requireRow(db, projectId, id));
}

export async function listStreamingPipelines(db: Executor, projectId: string, query: PageQuery) {
  const filtered = db.selectFrom('streamingPipelines').where('projectId', '=', projectId);
  const [rows, total] = await Promise.all([
    filtered.selectAll().orderBy('name').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(filtered),
  ]);
  return pageOf(query, rows.map(toStreamingPipeline), total);
}

function refuseUnlessStopped(row: Row, what: string): void {
  if (!EDITABLE.includes(row.status as Status))
    throw conflict(`Streaming pipeline ${row.id} is ${row.status}: stop it before you ${what} it.`);
}

export async function replaceStreamingPipeline(
  db: Executor,
  accountId: string,
  projectId: string,
  id: string,
  request: StreamingPipelineRequest,
) {
  refuseUnlessStopped(await requireRow(db, projectId, id), 'change');
  await checkDefinition(db, accountId, request);
  try {
    await db
      .updateTable('streamingPipelines')
      .set({ name: request.name, agentId: request.agentId, definition: definitionOf(request), updatedAt: now() })
      .where('id', '=', id)
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(request.name);
    throw error;
  }
  return requireStreamingPipeline(db, projectId, id);
}

export async function deleteStreamingPipeline(db: Executor, projectId: string, id: string): Promise<void> {
  refuseUnlessStopped(await requireRow(db, projectId, id), 'delete');
  await db.deleteFrom('streamingPipelines').where('id', '=', id).execute();
}

/** Moves the status by `move` when the row is in one of the move's sources; answers whether it moved. */
async function move(
  db: Executor,
  id: string,
  name: keyof typeof MOVES,
  set: Partial<Pick<Row, 'workId' | 'statusMessage'>> = {},
) {
  const { from, to } = MOVES[name];
  const moved = await db
    .updateTable('streamingPipelines')
    .set({ status: to, ...set, updatedAt: now() })
    .where('id', '=', id)
    .where('status', 'in', from)
    .executeTakeFirst();
  return Number(moved.numUpdatedRows) > 0;
}

/** Hands the pipeline to its agent to run; it is STARTING until the agent reports it running. */
export async function startStreamingPipeline(db: Executor, accountId: string, projectId: string, id: string) {
  const row = await requireRow(db, projectId, id);
  if (!MOVES.start.from.includes(row.status as Status))
    throw conflict(`Streaming pipeline ${id} is ${row.status}: it cannot be started.`);
  const pipeline = toStreamingPipeline(row);
  const workId = await enqueueAgentWork(db, {
    accountId,
    agentId: row.agentId,
    kind: RUN_STREAMING_PIPELINE,
    payload: {
      streamingPipelineId: id,
      streamingSource: pipeline.streamingSource,
      streamingTarget: pipeline.streamingTarget,
      advancedProperties: pipeline.advancedProperties,
    },
  });
  await move(db, id, 'start', { workId, statusMessage: null });
  return requireStreamingPipeline(db, projectId, id);
}

/** Asks the agent to stop the pipeline; one that no agent has taken yet is stopped at once. */
export async function stopStreamingPipeline(db: Executor, projectId: string, id: string) {
  const row = await requireRow(db, projectId, id);
  if (!MOVES.stop.from.includes(row.status as Status))
    throw conflict(`Streaming pipeline ${id} is ${row.status}: it is not running.`);
  await move(db, id, 'stop');
  if ((await cancelAgentWork(db, row.workId!)) === 'CANCELLED') await move(db, id, 'stopped before delivery', { workId: null });
  return requireStreamingPipeline(db, projectId, id);
}

// What the agent running a pipeline reports moves its status; reports about an earlier run are ignored.
onAgentWorkReport(RUN_STREAMING_PIPELINE, async (trx, { work, report }) => {
  const row = await trx
    .selectFrom('streamingPipelines')
    .select(['id', 'workId'])
    .where('workId', '=', work.id)
    .executeTakeFirst();
  if (!row) return;
  const message = typeof report.body.message === 'string' ? report.body.message.slice(0, 2000) : null;
  if (report.type === 'progress' && report.body.status === 'RUNNING')
    await move(trx, row.id, 'agent reports running', { statusMessage: message });
  if (report.type === 'done') await move(trx, row.id, 'agent reports done', { workId: null, statusMessage: message });
  if (report.type === 'failed') {
    // A run stopped on request ends as a failure of its work (the agent was interrupted): that is a stop.
    const stopped = await move(trx, row.id, 'agent reports stopped', { workId: null, statusMessage: null });
    if (!stopped)
      await move(trx, row.id, 'agent reports failure', {
        workId: null,
        statusMessage: message ?? 'the agent reported a failure',
      });
  }
});
