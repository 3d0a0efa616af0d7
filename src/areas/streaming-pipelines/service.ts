/**
 * The streaming pipelines' rules: definitions that carry no secret value, the agent a pipeline runs on,
 * unique names, the status a start, a stop or the agent's reports move it to (with its event), and how a
 * pipeline and its status are shown. The SQL is the repository's.
 */
import { checkExpectedVersion } from '../../core/conditional.ts';
import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound, ProblemError, unprocessable } from '../../core/problems.ts';
import { credentialViolations, refuseCredentials } from '../../core/credentials.ts';
import { WORK_KINDS } from '../../contract/work.ts';
import { isStreamingProgress, type StreamingPipelinePayload, type StreamingProgress } from '../../contract/streaming.ts';
import { cancelAgentWork, enqueueAgentWork, findAgent, unfinishedWorkOf, type AgentWorkReportHandler } from '../agents/index.ts';
import { readStoredDefinition } from './stored-definitions.ts';
import { emit } from '../../core/outbox.ts';
import { recordStreamingLineage } from '../lineage/index.ts';
import { streamingDatasets, tablesFirstWritten } from './lineage.ts';
import {
  accountOfPipelineProject,
  deletePipelineRow,
  findPipeline,
  findPipelineById,
  insertPipeline,
  listPipelineRows,
  nameOfPipelineOn,
  pipelineStatus,
  setProgress,
  setStatus,
  setStatusIf,
  updatePipelineRow,
  type PipelineRow,
} from './repository.ts';
import {
  SECRET_REFERENCE_FIELDS,
  type StreamingPipeline,
  type StreamingPipelineQuery,
  type StreamingPipelineRequest,
  type StreamingPipelineStatus,
} from './schemas.ts';

type Definition = Pick<StreamingPipelineRequest, 'advancedProperties' | 'streamingSource' | 'streamingTarget'>;

export const START_WORK = WORK_KINDS.startStreamingPipeline;
export const STOP_WORK = WORK_KINDS.stopStreamingPipeline;
export const DROP_SLOT_WORK = WORK_KINDS.dropStreamingSlot;

/** Free-form properties whose names say they hold a credential: those belong in a secret reference. */
const CREDENTIAL_NAME = /pass(word)?|pwd|secret|token|credential|account.?key|private.?key/i;

/** A value that carries a credential itself, as in `jdbc:postgresql://db/x?user=a&password=hunter2` or `pwd=...;`. */
const CREDENTIAL_IN_VALUE = new RegExp(`(^|[?&;:,/\\s])[\\w.-]*(${CREDENTIAL_NAME.source})[\\w.-]*\\s*=\\s*[^&;,\\s]`, 'i');

/** Every string in `value` but those under `skipped` (the secret references), with its path. */
function* stringsOf(value: unknown, field: string, skipped: Set<unknown>): Generator<[string, string]> {
  if (skipped.has(value)) return;
  if (typeof value === 'string') yield [field, value];
  else if (Array.isArray(value)) {
    for (const [index, item] of value.entries()) yield* stringsOf(item, `${field}[${index}]`, skipped);
  } else if (value && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) yield* stringsOf(item, `${field}.${key}`, skipped);
  }
}

/** The secret references of a definition (where each type keeps them), by field. */
type Field<T> = readonly [string, T];

function referencesOf(request: StreamingPipelineRequest): Field<object | undefined>[] {
  const target = request.streamingTarget;
  return [
    ['body.streamingSource.connection.password', request.streamingSource.connection.password],
    ...(target.type === 'abs' ? ([['body.streamingTarget.accountKey', target.accountKey]] as const) : []),
    ...(target.type === 'snowflake'
      ? ([
          ['body.streamingTarget.connection.authentication.privateKey', target.connection.authentication.privateKey],
          ['body.streamingTarget.connection.authentication.passphrase', target.connection.authentication.passphrase],
        ] as const)
      : []),
  ];
}

/** The free-form properties of a definition, by field. */
function propertiesOf(request: StreamingPipelineRequest): Field<Record<string, string> | undefined>[] {
  const target = request.streamingTarget;
  return [
    ['body.advancedProperties', request.advancedProperties],
    ['body.streamingSource.connection.jdbcProperties', request.streamingSource.connection.jdbcProperties],
    ...(target.type === 'snowflake'
      ? ([['body.streamingTarget.connection.jdbcProperties', target.connection.jdbcProperties]] as const)
      : []),
  ];
}

/**
 * Refuses a definition that carries a secret value: the secret references (passwords, account keys,
 * private keys and passphrases) may hold only the reference fields, and free-form properties may not be
 * named like credentials. Violations name the field, never its value.
 */
function checkNoSecretValues(request: StreamingPipelineRequest): void {
  const violations: string[] = [];
  const references = referencesOf(request);
  for (const [field, reference] of references) {
    for (const key of Object.keys(reference ?? {})) {
      if (!SECRET_REFERENCE_FIELDS.includes(key)) {
        violations.push(`${field}.${key}: a secret reference holds only ${SECRET_REFERENCE_FIELDS.join(', ')}, never a value`);
      }
    }
  }
  for (const [field, values] of propertiesOf(request)) {
    for (const key of Object.keys(values ?? {})) {
      if (CREDENTIAL_NAME.test(key))
        violations.push(`${field}.${key}: credentials go in a secret reference, never in a property`);
    }
  }
  const scanned = {
    advancedProperties: request.advancedProperties,
    streamingSource: request.streamingSource,
    streamingTarget: request.streamingTarget,
  };
  const skipped = new Set<unknown>(references.map(([, reference]) => reference).filter(Boolean));
  for (const [field, value] of stringsOf(scanned, 'body', skipped)) {
    if (CREDENTIAL_IN_VALUE.test(value)) violations.push(`${field}: carries a credential; it goes in a secret reference`);
  }
  if (violations.length) throw badRequest('The definition carries a secret value where a secret reference belongs.', violations);
}

function toPipeline(row: PipelineRow): StreamingPipeline {
  const { definition, problems } = readStoredDefinition(row.definition);
  return {
    streamingPipelineId: row.id,
    projectId: row.projectId,
    name: row.name,
    agentId: row.agentId,
    advancedProperties: definition.advancedProperties,
    streamingSource: definition.streamingSource as StreamingPipeline['streamingSource'],
    streamingTarget: definition.streamingTarget as StreamingPipeline['streamingTarget'],
    status: row.status as StreamingPipelineStatus,
    ...(problems.length > 0 && { definitionProblems: problems }),
  };
}

export function statusOf(row: PipelineRow) {
  const progress = row.progress === null ? undefined : (JSON.parse(row.progress) as StreamingProgress);
  return {
    streamingPipelineId: row.id,
    status: row.status as StreamingPipelineStatus,
    ...(row.statusMessage !== null && { message: row.statusMessage }),
    changedAt: row.statusChangedAt,
    ...(progress && {
      phase: progress.phase,
      position: progress.position,
      lagSeconds: progress.lagSeconds,
      rowsPerTable: progress.rowsPerTable,
      reportedAt: progress.reportedAt,
    }),
  };
}

/** Refuses to delete an agent that a streaming pipeline runs on (registered with app.agentDeletion). */
export async function refuseAgentDeletion(db: Executor, agentId: string): Promise<void> {
  const name = await nameOfPipelineOn(db, agentId);
  if (name !== undefined) throw conflict(`Streaming pipeline "${name}" runs on this agent; delete it or move it first.`);
}

/** The agent must be one of the account's (422 otherwise, as a field of the body). */
async function checkAgent(db: Executor, accountId: string, agentId: string): Promise<void> {
  const agent = await findAgent(db, accountId, agentId);
  if (!agent) throw unprocessable('The agent does not exist in this account.', ['body.agentId: is not an agent of this account']);
}

const nameTaken = (name: string) => conflict(`A streaming pipeline named "${name}" already exists in this project.`);

export async function requirePipeline(db: Executor, projectId: string, pipelineId: string): Promise<PipelineRow> {
  const row = await findPipeline(db, projectId, pipelineId);
  if (!row) throw notFound(`Streaming pipeline ${pipelineId} does not exist in this project.`);
  return row;
}

function definitionOf(request: StreamingPipelineRequest): string {
  const definition: Definition = {
    advancedProperties: request.advancedProperties ?? {},
    streamingSource: request.streamingSource,
    streamingTarget: request.streamingTarget,
  };
  return JSON.stringify(definition);
}

export async function createPipeline(
  db: Executor,
  accountId: string,
  projectId: string,
  request: StreamingPipelineRequest,
): Promise<StreamingPipeline> {
  checkNoSecretValues(request);
  await checkAgent(db, accountId, request.agentId);
  const at = now();
  const row: PipelineRow = {
    id: randomUUID(),
    projectId,
    agentId: request.agentId,
    name: request.name,
    definition: definitionOf(request),
    status: 'STOPPED',
    statusMessage: null,
    statusChangedAt: at,
    createdAt: at,
    progress: null,
    rowVersion: 0,
  };
  try {
    await insertPipeline(db, row);
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(request.name);
    throw error;
  }
  return toPipeline(row);
}

export async function listPipelines(db: Executor, projectId: string, query: StreamingPipelineQuery) {
  const { rows, total } = await listPipelineRows(db, projectId, query);
  return { results: rows.map(toPipeline), total };
}

export function readPipeline(db: Executor, projectId: string, pipelineId: string): Promise<StreamingPipeline> {
  return requirePipeline(db, projectId, pipelineId).then(toPipeline);
}

const IDLE: StreamingPipelineStatus[] = ['STOPPED', 'FAILED'];

function requireIdle(row: PipelineRow, action: string): void {
  if (!IDLE.includes(row.status as StreamingPipelineStatus)) {
    throw conflict(`The streaming pipeline is ${row.status}; stop it before you ${action} it.`);
  }
}

export async function replacePipeline(
  db: Executor,
  accountId: string,
  projectId: string,
  pipelineId: string,
  request: StreamingPipelineRequest,
): Promise<StreamingPipeline> {
  const row = await requirePipeline(db, projectId, pipelineId);
  // A write with If-Match whose pipeline moved since its check (started, say) is a 412, not a 409.
  checkExpectedVersion('streamingPipelines', row.id, Number(row.rowVersion ?? 0));
  requireIdle(row, 'replace');
  checkNoSecretValues(request);
  await checkAgent(db, accountId, request.agentId);
  const next = { ...row, name: request.name, agentId: request.agentId, definition: definitionOf(request) };
  try {
    await updatePipelineRow(db, pipelineId, { name: next.name, agentId: next.agentId, definition: next.definition });
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(request.name);
    throw error;
  }
  return toPipeline(next);
}

/**
 * Deletes an idle pipeline. With `dropSlot`, its agent is told to drop the replication slot and
 * publication it made at the source (the work carries the definition, for the connection and its secret
 * references); without, they stay.
 */
export async function deletePipeline(
  db: Executor,
  accountId: string,
  projectId: string,
  pipelineId: string,
  dropSlot = false,
): Promise<void> {
  const row = await requirePipeline(db, projectId, pipelineId);
  checkExpectedVersion('streamingPipelines', row.id, Number(row.rowVersion ?? 0));
  requireIdle(row, 'delete');
  if (dropSlot) {
    const { definition } = readStoredDefinition(row.definition);
    await enqueueAgentWork(db, {
      accountId,
      agentId: row.agentId,
      kind: DROP_SLOT_WORK,
      payload: { streamingPipelineId: pipelineId, projectId, name: row.name, definition },
    });
  }
  await deletePipelineRow(db, pipelineId);
}

/** The agent's report on dropping a deleted pipeline's slot: the work keeps its result; the pipeline is gone. */
export const onDropSlotReport: AgentWorkReportHandler = async () => undefined;

async function moveStatus(db: Executor, pipelineId: string, status: StreamingPipelineStatus, message: string | null) {
  const moved = await setStatus(db, pipelineId, status, message);
  if (moved) await announceStatus(db, { id: pipelineId, ...moved }, status, message);
}

/** The `streaming-pipeline.status-changed` event of a move, in the transaction of the move. */
async function announceStatus(
  db: Executor,
  pipeline: { id: string; projectId: string; name: string },
  status: StreamingPipelineStatus,
  message: string | null,
): Promise<void> {
  const accountId = await accountOfPipelineProject(db, pipeline.projectId);
  if (!accountId) return;
  await emit(db, {
    accountId,
    type: 'streaming-pipeline.status-changed',
    projectId: pipeline.projectId,
    subject: `projects/${pipeline.projectId}/streaming-pipelines/${pipeline.id}`,
    data: { streamingPipelineId: pipeline.id, name: pipeline.name, status, ...(message !== null && { message }) },
  });
}

/**
 * Asks the pipeline's agent to start (from STOPPED or FAILED: STARTING) or stop it (from RUNNING: STOPPING),
 * through agent work that carries the definition (secret references only).
 */
export async function requestRun(
  db: Executor,
  accountId: string,
  projectId: string,
  pipelineId: string,
  action: 'start' | 'stop',
  force = false,
): Promise<ReturnType<typeof statusOf>> {
  const row = await requirePipeline(db, projectId, pipelineId);
  if (action === 'stop' && force) return forceStop(db, row);
  const { definition, problems } = readStoredDefinition(row.definition);
  if (action === 'start' && problems.length > 0) {
    throw new ProblemError(
      409,
      'The streaming pipeline was stored in an older shape that its schemas no longer fit; write it again (PUT) to start it.',
      { violations: problems },
    );
  }
  // The conditional move comes first: of two concurrent requests only one moves the row (on PostgreSQL the
  // other waits for the row lock, then finds the status changed), so the agent gets one run, not two.
  const moved = await setStatusIf(db, pipelineId, action === 'start' ? IDLE : ['RUNNING'], {
    status: action === 'start' ? 'STARTING' : 'STOPPING',
    statusMessage: null,
    statusChangedAt: now(),
    ...(action === 'start' && { progress: null }),
  });
  if (!moved) {
    const current = await requirePipeline(db, projectId, pipelineId);
    if (action === 'start') requireIdle(current, 'start');
    throw conflict(`The streaming pipeline is ${current.status}; only a RUNNING one can be stopped.`);
  }
  // The run is the start work, which the agent holds while the pipeline runs: a stop cancels it (so that it
  // is not delivered again should the agent vanish) and tells the agent to end it and report when it has.
  // The stop names the run it ends: its report closes the run's lineage (the cancelled run's own report cannot).
  const [runId] = action === 'stop' ? await cancelRunsOf(db, row, [START_WORK]) : [];
  const payload: StreamingPipelinePayload = { streamingPipelineId: pipelineId, projectId, accountId, name: row.name, definition };
  await enqueueAgentWork(db, {
    accountId,
    agentId: row.agentId,
    kind: action === 'start' ? START_WORK : STOP_WORK,
    payload: runId === undefined ? payload : { ...payload, runId },
  });
  await announceStatus(db, row, action === 'start' ? 'STARTING' : 'STOPPING', null);
  return statusOf(await requirePipeline(db, projectId, pipelineId));
}

/**
 * A forced stop: for a pipeline whose agent took a start or stop and vanished (STARTING or STOPPING for
 * ever). Cancels the pipeline's outstanding start/stop work and moves it to STOPPED at once; a late report
 * on that work no longer moves the status (onRunReport).
 */
async function forceStop(db: Executor, row: PipelineRow): Promise<ReturnType<typeof statusOf>> {
  if (IDLE.includes(row.status as StreamingPipelineStatus)) {
    throw conflict(`The streaming pipeline is ${row.status} already.`);
  }
  // A run that had begun (its START recorded) ends ABORT: nobody will report it done or failed.
  for (const runId of await cancelRunsOf(db, row, [START_WORK])) {
    if (row.progress !== null) await reportLineage(db, runId, row.id, 'ABORT');
  }
  await cancelRunsOf(db, row, [STOP_WORK]);
  await moveStatus(db, row.id, 'STOPPED', 'stopped by force, without the agent');
  return statusOf(await requirePipeline(db, row.projectId, row.id));
}

/** Cancels the pipeline's unfinished work of `kinds`; the ids of the work cancelled. */
async function cancelRunsOf(db: Executor, row: PipelineRow, kinds: string[]): Promise<string[]> {
  const cancelled: string[] = [];
  for (const work of await unfinishedWorkOf(db, row.agentId, kinds)) {
    const payload = work.payload as { streamingPipelineId?: string } | null;
    if (payload?.streamingPipelineId !== row.id) continue;
    await cancelAgentWork(db, work.id);
    cancelled.push(work.id);
  }
  return cancelled;
}

function failureMessage(body: unknown): string {
  const message = (body as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message.slice(0, 4000) : 'the agent reported a failure without a reason';
}

/**
 * The lineage of a run (its id: the start work's), as OpenLineage events of the streaming job: START with
 * the run's first progress report (every table of the definition, source → target), or just before its end
 * when it ends before one (OpenLineage requires a START and an end of every run), RUNNING when a table
 * gets its first rows of the run, COMPLETE when the run ends (by itself, or stopped: on the stop's report),
 * FAIL when it fails, ABORT when it is stopped by force (without its agent). The tables a report names
 * are checked against the definition (tablesFirstWritten); the datasets are named from the definition.
 */
async function reportLineage(
  db: Executor,
  runId: string,
  pipelineId: string,
  progress: StreamingProgress | 'COMPLETE' | 'FAIL' | 'ABORT',
): Promise<void> {
  const row = await findPipelineById(db, pipelineId);
  if (!row) return;
  const accountId = await accountOfPipelineProject(db, row.projectId);
  if (!accountId) return;
  const { definition } = readStoredDefinition(row.definition);
  const at = { accountId, projectId: row.projectId, runId, jobName: row.name };
  if (typeof progress === 'string') {
    // A run that ends before its first progress report (it failed to begin, or was stopped first) has had no
    // START: OpenLineage wants one before a run's end (consumers such as Marquez open the run with it).
    if (row.progress === null && progress !== 'ABORT') {
      await recordStreamingLineage(db, { ...at, eventType: 'START', ...streamingDatasets(definition) });
    }
    await recordStreamingLineage(db, { ...at, eventType: progress, ...streamingDatasets(definition) });
    return;
  }
  const before = row.progress === null ? undefined : (JSON.parse(row.progress) as StreamingProgress);
  const first = tablesFirstWritten(definition, before?.rowsPerTable, progress.rowsPerTable);
  if (!before) await recordStreamingLineage(db, { ...at, eventType: 'START', ...streamingDatasets(definition) });
  if (first.size > 0) await recordStreamingLineage(db, { ...at, eventType: 'RUNNING', ...streamingDatasets(definition, first) });
}

/**
 * The agent's reports on a run and on a stop.
 *
 * Start (the run): a progress report (StreamingProgress) is kept for the status, and its RUNNING moves
 * STARTING to RUNNING; `done` ends the run: STOPPED (`{state: "STOPPED"}`: it ended by itself), or RUNNING
 * from STARTING for an agent that runs the pipeline outside the work; `failed` moves STARTING or RUNNING to
 * FAILED with the reason. Stop: `done` moves STOPPING to STOPPED, `failed` to FAILED; either ends the lineage
 * of the run the stop cancelled (COMPLETE or FAIL), which that run's own final report no longer can.
 */
export function onRunReport(action: 'start' | 'stop'): AgentWorkReportHandler {
  return async (db, { work, report }) => {
    // Cancelled work (a stop, a forced stop) no longer carries its payload, and moves nothing.
    const streamingPipelineId = (work.payload as { streamingPipelineId?: string } | null)?.streamingPipelineId;
    if (!streamingPipelineId) return;
    const status = (await pipelineStatus(db, streamingPipelineId)) as StreamingPipelineStatus | undefined;
    if (action === 'start') {
      // Only the run in progress moves the status: a late report on a run stopped by force does not.
      if (status !== 'STARTING' && status !== 'RUNNING') return;
      if (report.type === 'progress') {
        if (!isStreamingProgress(report.body)) return;
        const progress = report.body;
        const kept: StreamingProgress = {
          state: progress.state,
          phase: progress.phase === 'snapshot' ? 'snapshot' : 'streaming',
          position: progress.position,
          lagSeconds: progress.lagSeconds,
          rowsPerTable: progress.rowsPerTable,
          reportedAt: typeof progress.reportedAt === 'string' ? progress.reportedAt : now(),
        };
        await reportLineage(db, work.id, streamingPipelineId, kept);
        await setProgress(db, streamingPipelineId, JSON.stringify(kept));
        if (status === 'STARTING' && progress.state === 'RUNNING') await moveStatus(db, streamingPipelineId, 'RUNNING', null);
        return;
      }
      if (report.type === 'failed') {
        await reportLineage(db, work.id, streamingPipelineId, 'FAIL');
        await moveStatus(db, streamingPipelineId, 'FAILED', failureMessage(report.body));
        return;
      }
      const ended = (report.body as { state?: unknown } | null)?.state === 'STOPPED';
      if (ended) await reportLineage(db, work.id, streamingPipelineId, 'COMPLETE');
      if (ended) await moveStatus(db, streamingPipelineId, 'STOPPED', 'the run ended');
      else if (status === 'STARTING') await moveStatus(db, streamingPipelineId, 'RUNNING', null);
      return;
    }
    if (report.type === 'progress' || status !== 'STOPPING') return;
    const [next, message] = report.type === 'done' ? ['STOPPED', null] : ['FAILED', failureMessage(report.body)];
    // The run the stop ended (its start work was cancelled, so its own final report moves nothing) ends here.
    const runId = (work.payload as { runId?: unknown }).runId;
    if (typeof runId === 'string')
      await reportLineage(db, runId, streamingPipelineId, report.type === 'done' ? 'COMPLETE' : 'FAIL');
    await moveStatus(db, streamingPipelineId, next as StreamingPipelineStatus, message);
  };
}

/** The secret references of a definition: where a secret is kept, which is what belongs there. */
function secretReferencesOf(request: StreamingPipelineRequest): unknown[] {
  const target = request.streamingTarget;
  return [
    request.streamingSource.connection.password,
    ...(target.type === 'abs' ? [target.accountKey] : []),
    ...(target.type === 'snowflake'
      ? [target.connection.authentication.privateKey, target.connection.authentication.passphrase]
      : []),
  ].filter((reference) => reference !== undefined && typeof reference === 'object');
}

/**
 * Refuses a definition that carries a credential anywhere but in its secret references: a property named
 * like one (`apikey`), a host with `user:password@`, a JDBC URL with `password=` (percent-encoded or not),
 * a `mongodb://u:pw@` URL, `SharedAccessKey=`, a `Bearer ...` value (src/core/credentials.ts). 400 naming
 * each field; the value is never echoed.
 */
export function checkNoCredentials(request: StreamingPipelineRequest): void {
  const { advancedProperties, streamingSource, streamingTarget } = request;
  const violations = credentialViolations(
    { advancedProperties, streamingSource, streamingTarget },
    'body',
    'credentials go in a secret reference',
    { skip: new Set(secretReferencesOf(request)) },
  );
  refuseCredentials(violations, 'The definition carries a credential where only a secret reference may be.');
}
