import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound, ProblemError } from '../../core/problems.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import { enqueueAgentWork } from '../agents/index.ts';
import {
  parsePipeline,
  PIPELINE_SUFFIXES,
  PipelineFileError,
  type Pipeline,
  type VariableValue,
} from '../../contract/pipeline-file.ts';
import { WORK_KINDS, type ExecutionPayload } from '../../contract/work.ts';
import type { ExecutionTable } from './tables.ts';
import { isFinal, moveOf, type ExecutionEvent, type ExecutionStatus } from './states.ts';
import type { ExecutionStep, ListExecutionsQuery, PipelineExecutionSummary } from './schemas.ts';
import { requireArtifact } from '../artifacts/index.ts';

export type ExecutionRow = Selectable<ExecutionTable>;
export type ExecutionKind = 'PIPELINE' | 'TEST';
export const AGENT_WORK_KINDS = { PIPELINE: WORK_KINDS.executePipeline, TEST: WORK_KINDS.executeTests } as const;

const ORCHESTRATION = PIPELINE_SUFFIXES.orchestration;
const TEST_ORCHESTRATION = PIPELINE_SUFFIXES.test;

/** The environment of the project with its default agent, or a 404. */
async function requireEnvironment(db: Executor, projectId: string, name: string) {
  const row = await db
    .selectFrom('environments')
    .select(['id', 'name', 'defaultAgentId'])
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (!row) throw notFound(`Environment "${name}" does not exist in this project.`);
  return row;
}

/**
 * The artifact a run reads: version `versionName` (404 when unknown, 410 when disabled), or the latest
 * enabled version of the environment (404 when it has none).
 */
async function requireRunnableArtifact(db: Executor, environmentId: string, versionName: string | undefined) {
  const row = await requireArtifact(db, environmentId, versionName);
  if (row.enabled !== 1)
    throw new ProblemError(410, `Version "${row.versionName}" is disabled; enable it or run another version.`);
  return row;
}

/** The pipeline files of an artifact (orchestration only), by path. */
async function orchestrationPaths(db: Executor, artifactId: number): Promise<string[]> {
  const rows = await db
    .selectFrom('artifactAssets')
    .select('path')
    .where('artifactId', '=', artifactId)
    .orderBy('path')
    .execute();
  return rows.map((row) => row.path).filter((path) => path.endsWith(ORCHESTRATION));
}

async function fileText(db: Executor, artifactId: number, path: string): Promise<string> {
  const row = await db
    .selectFrom('artifactAssets')
    .select('content')
    .where('artifactId', '=', artifactId)
    .where('path', '=', path)
    .executeTakeFirstOrThrow();
  return row.content.toString('utf8');
}

/** The path of pipeline `name` (a path, with or without `.orch.yaml`) among `paths`, or a 404. */
function requirePipelinePath(paths: string[], name: string, what = 'Pipeline'): string {
  const path = [name, `${name}${ORCHESTRATION}`].find((candidate) => paths.includes(candidate));
  if (!path) throw notFound(`${what} "${name}" is not an orchestration pipeline of this version.`);
  return path;
}

/** The agent that runs the work: the one named (of the caller's account), else the environment's default. */
async function requireAgent(db: Executor, accountId: string, named: string | undefined, environmentDefault: string | null) {
  const agentId = named ?? environmentDefault;
  if (agentId === null) {
    throw badRequest('The environment has no default agent; name one.', [
      'agentId: required, the environment has no default agent',
    ]);
  }
  const row = await db
    .selectFrom('agents')
    .select('id')
    .where('id', '=', agentId)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (!row) throw notFound(`Agent ${agentId} does not exist.`);
  return agentId;
}

function parseOrRefuse(text: string, path: string): Pipeline {
  try {
    return parsePipeline(text);
  } catch (error) {
    if (error instanceof PipelineFileError) {
      throw new ProblemError(422, `Pipeline "${path}" cannot run: ${error.message}`);
    }
    throw error;
  }
}

function fits(type: string, value: unknown): boolean {
  return type === 'NUMBER' ? typeof value === 'number' : typeof value === 'string';
}

/**
 * The variables a run starts with: the project defaults, replaced by the environment's overrides,
 * replaced by what the request gives. A request's scalar must name a project variable (or a TEXT/NUMBER
 * variable the pipeline declares) and fit its type; a grid must name a GRID variable the pipeline declares.
 * Every misfit is a violation of one 400.
 */
async function resolveVariables(
  db: Executor,
  projectId: string,
  environmentId: string,
  declared: Pipeline['variables'],
  scalars: Record<string, VariableValue> = {},
  grids: Record<string, VariableValue[][]> = {},
): Promise<Record<string, VariableValue | VariableValue[][]>> {
  const project = await db
    .selectFrom('projectVariables')
    .leftJoin('variableOverrides', (join) =>
      join
        .onRef('variableOverrides.variableId', '=', 'projectVariables.id')
        .on('variableOverrides.environmentId', '=', environmentId),
    )
    .select(['projectVariables.name', 'projectVariables.type', 'projectVariables.value', 'variableOverrides.value as override'])
    .where('projectVariables.projectId', '=', projectId)
    .execute();
  // Keyed by user-chosen names: no prototype, so `__proto__` or `constructor` is a name like any other.
  const resolved = Object.create(null) as Record<string, VariableValue | VariableValue[][]>;
  const types = new Map<string, string>();
  for (const [name, variable] of Object.entries(declared)) types.set(name, variable.type);
  for (const row of project) {
    types.set(row.name, row.type);
    const text = row.override ?? row.value;
    if (text !== null) resolved[row.name] = JSON.parse(text) as VariableValue;
  }
  const violations: string[] = [];
  for (const [name, value] of Object.entries(scalars)) {
    const type = types.get(name);
    if (type === undefined || type === 'GRID') violations.push(`scalarVariables.${name}: not a project variable`);
    else if (!fits(type, value))
      violations.push(`scalarVariables.${name}: must be a ${type === 'NUMBER' ? 'number' : 'string'} for a ${type} variable`);
    else resolved[name] = value;
  }
  for (const [name, rows] of Object.entries(grids)) {
    if (!Object.hasOwn(declared, name) || declared[name].type !== 'GRID')
      violations.push(`gridVariables.${name}: not a GRID variable of the pipeline`);
    else resolved[name] = rows;
  }
  if (violations.length > 0) throw badRequest('Some variables cannot be given to this run.', violations);
  return resolved;
}

export interface RunRequest {
  accountId: string;
  projectId: string;
  environmentName: string;
  versionName?: string;
  agentId?: string;
  trigger: 'MANUAL' | 'SCHEDULE';
  scheduleId?: string;
  scheduledFor?: string;
}

/** What a run needs that is read before its transaction: parsing a pipeline file is kept out of it. */
export interface PreparedRun {
  request: RunRequest;
  environment: { id: string; name: string };
  versionName: string;
  agentId: string;
  pipelines: Record<string, string>;
  variables: Record<string, VariableValue | VariableValue[][]>;
}

/** Reads and checks what a pipeline run of `pipelineName` needs. */
export async function preparePipelineRun(
  db: Executor,
  request: RunRequest & {
    pipelineName: string;
    scalarVariables?: Record<string, VariableValue>;
    gridVariables?: Record<string, VariableValue[][]>;
  },
): Promise<PreparedRun & { pipelineName: string }> {
  const environment = await requireEnvironment(db, request.projectId, request.environmentName);
  const artifact = await requireRunnableArtifact(db, environment.id, request.versionName);
  const pipelineName = requirePipelinePath(await orchestrationPaths(db, artifact.id), request.pipelineName);
  const text = await fileText(db, artifact.id, pipelineName);
  const pipeline = parseOrRefuse(text, pipelineName);
  const agentId = await requireAgent(db, request.accountId, request.agentId, environment.defaultAgentId);
  const variables = await resolveVariables(
    db,
    request.projectId,
    environment.id,
    pipeline.variables,
    request.scalarVariables,
    request.gridVariables,
  );
  return {
    request,
    environment,
    versionName: artifact.versionName,
    agentId,
    pipelines: { [pipelineName]: text },
    variables,
    pipelineName,
  };
}

/**
 * Reads and checks what a test run needs. Test pipelines are orchestration pipelines whose file ends in
 * `.test.orch.yaml`: scope TEST runs `testName`, PIPELINE the tests beside `pipelineName` whose name
 * starts with its name, PROJECT every test of the version.
 */
export async function prepareTestRun(
  db: Executor,
  request: RunRequest & { scope: 'TEST' | 'PIPELINE' | 'PROJECT'; pipelineName?: string; testName?: string },
): Promise<PreparedRun & { tests: string[]; pipelineName: string | null; testName: string | null }> {
  const missing =
    request.scope === 'TEST' && request.testName === undefined
      ? 'testName: required for scope TEST'
      : request.scope === 'PIPELINE' && request.pipelineName === undefined
        ? 'pipelineName: required for scope PIPELINE'
        : undefined;
  if (missing) throw badRequest('The scope needs a name.', [missing]);
  const environment = await requireEnvironment(db, request.projectId, request.environmentName);
  const artifact = await requireRunnableArtifact(db, environment.id, request.versionName);
  const paths = await orchestrationPaths(db, artifact.id);
  const allTests = paths.filter((path) => path.endsWith(TEST_ORCHESTRATION));
  let tests: string[];
  let pipelineName: string | null = null;
  let testName: string | null = null;
  if (request.scope === 'TEST') {
    const name = request.testName!;
    testName = requirePipelinePath(
      allTests,
      name.endsWith(TEST_ORCHESTRATION) ? name : `${name.replace(/\.orch\.yaml$/, '')}${TEST_ORCHESTRATION}`,
      'Test',
    );
    tests = [testName];
  } else if (request.scope === 'PIPELINE') {
    pipelineName = requirePipelinePath(paths, request.pipelineName!);
    const stem = pipelineName.slice(0, -ORCHESTRATION.length);
    tests = allTests.filter((path) => path !== pipelineName && path.startsWith(stem));
  } else {
    tests = allTests;
  }
  if (tests.length === 0) throw notFound(`No test pipeline (a file ending in ${TEST_ORCHESTRATION}) is in this scope.`);
  const pipelines = Object.create(null) as Record<string, string>;
  for (const path of tests) pipelines[path] = await fileText(db, artifact.id, path);
  const agentId = await requireAgent(db, request.accountId, request.agentId, environment.defaultAgentId);
  const variables = await resolveVariables(db, request.projectId, environment.id, {});
  return {
    request,
    environment,
    versionName: artifact.versionName,
    agentId,
    pipelines,
    variables,
    tests,
    pipelineName,
    testName,
  };
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
  try {
    await trx
      .insertInto('executions')
      .values({
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
        agentWorkId: null,
        executionTag: fields.executionTag ?? null,
        runningTag: fields.executionTag ?? null,
        trigger: run.request.trigger,
        scheduleId: run.request.scheduleId ?? null,
        scheduledFor: run.request.scheduledFor ?? null,
        status,
        message: null,
        variables: JSON.stringify(run.variables),
        startedAt: now(),
        finishedAt: null,
        lastReportAt: null,
      })
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`Another execution tagged "${fields.executionTag}" is running in this project.`);
    throw error;
  }
  const payload: ExecutionPayload = {
    executionId: id,
    pipelines: run.pipelines,
    variables: run.variables,
    ...(fields.pipelineName !== null && kind === 'PIPELINE' && { pipelineName: fields.pipelineName }),
    ...(fields.tests && { tests: fields.tests }),
  };
  const agentWorkId = await enqueueAgentWork(trx, {
    accountId: run.request.accountId,
    agentId: run.agentId,
    kind: AGENT_WORK_KINDS[kind],
    payload,
  });
  await trx.updateTable('executions').set({ agentWorkId }).where('id', '=', id).execute();
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
  await trx
    .insertInto('executions')
    .values({
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
      status: moveOf('(none)', 'decline'),
      message,
      variables: '{}',
      startedAt: at,
      finishedAt: at,
      lastReportAt: null,
    })
    .execute();
  return id;
}

/** Run `id` of kind `kind` in the caller's project, or a 404. */
export async function requireExecution(db: Executor, accountId: string, projectId: string, id: string, kind: ExecutionKind) {
  const row = await db
    .selectFrom('executions')
    .selectAll()
    .where('id', '=', id)
    .where('projectId', '=', projectId)
    .where('accountId', '=', accountId)
    .where('kind', '=', kind)
    .executeTakeFirst();
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
): Promise<ExecutionRow> {
  for (;;) {
    const row = await db.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    const from = row.status as ExecutionStatus;
    const to = moveOf(from, event);
    const finished = isFinal(to);
    const set = {
      status: to,
      ...changes,
      ...(finished && { finishedAt: now(), runningTag: null }),
    };
    const result = await db.updateTable('executions').set(set).where('id', '=', id).where('status', '=', from).executeTakeFirst();
    if (result.numUpdatedRows === 0n) continue;
    // A step left open when the run ends (its last report refused once the run was cancelling) ends with the run.
    if (finished) {
      await db
        .updateTable('executionSteps')
        .set({ status: to === 'SUCCESS' || to === 'CANCELLED' ? to : 'FAILED', finishedAt: set.finishedAt })
        .where('executionId', '=', id)
        .where('status', '=', 'RUNNING')
        .execute();
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
}

/** Records a step the agent reported; a repeated report of a step updates it. */
export async function recordStep(db: Executor, executionId: string, step: ReportedStep): Promise<void> {
  const row = {
    executionId,
    position: step.index,
    name: step.name,
    status: step.status,
    startedAt: step.startedAt,
    finishedAt: step.finishedAt ?? null,
    message: step.message ?? null,
    childPipeline: step.childPipeline ?? null,
  };
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
      }),
    )
    .execute();
}

export async function listSteps(
  db: Executor,
  executionId: string,
  query: PageQuery,
): Promise<{ results: ExecutionStep[]; total: number }> {
  const ofRun = db.selectFrom('executionSteps').where('executionId', '=', executionId);
  const [rows, total] = await Promise.all([
    ofRun.selectAll().orderBy('position').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(ofRun),
  ]);
  return {
    results: rows.map((row) => ({
      id: String(row.position),
      name: row.name,
      result: { status: row.status, startedAt: row.startedAt, finishedAt: row.finishedAt, message: row.message },
      childPipeline: row.childPipeline,
    })),
    total,
  };
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
    trigger: row.trigger as 'MANUAL' | 'SCHEDULE',
    scheduleId: row.scheduleId,
    message: row.message,
  };
}

/** The opaque page token: where the previous page ended in (startedAt, id) descending order. */
function encodeToken(row: ExecutionRow): string {
  return Buffer.from(JSON.stringify([row.startedAt, row.id])).toString('base64url');
}

function decodeToken(token: string): [string, string] {
  try {
    const value = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as unknown;
    if (Array.isArray(value) && value.length === 2 && value.every((part) => typeof part === 'string'))
      return value as [string, string];
  } catch {
    // answered below
  }
  throw badRequest('The pagination token is not one this server gave.', ['paginationToken: not valid']);
}

/** A page of the account's pipeline executions, newest first, with the token of the next page. */
export async function listExecutions(db: Executor, accountId: string, query: ListExecutionsQuery) {
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
  if (query.paginationToken !== undefined) {
    const [startedAt, id] = decodeToken(query.paginationToken);
    select = select.where((eb) =>
      eb.or([eb('startedAt', '<', startedAt), eb.and([eb('startedAt', '=', startedAt), eb('id', '<', id)])]),
    );
  }
  const rows = await select
    .orderBy('startedAt', 'desc')
    .orderBy('id', 'desc')
    .limit(query.limit + 1)
    .execute();
  const page = rows.slice(0, query.limit);
  return { results: page.map(toSummary), more: rows.length > query.limit ? encodeToken(page[page.length - 1]) : null };
}
