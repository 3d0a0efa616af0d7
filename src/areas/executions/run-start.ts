/**
 * Starting a run: the rules that decide what a pipeline or test run gets before it is created. The
 * environment, its runnable version, the pipeline file (parsed, so a broken file is refused now, not on the
 * agent), the agent, and the variables (project default < environment override < request). Everything is
 * read through the owning areas' faces; nothing here writes (createExecution does, in the caller's
 * transaction).
 */
import type { Executor } from '../../core/db/database.ts';
import { badRequest, notFound, ProblemError } from '../../core/problems.ts';
import { HOSTED_TYPE, hostedAgentOf, requireAgent } from '../agents/index.ts';
import { artifactFilePaths, artifactFileText, requireArtifact } from '../artifacts/index.ts';
import { requireEnvironment, type WarehouseSettings } from '../environments/index.ts';
import { connectionSecret } from '../connections/index.ts';
import { valueOfType, variableValuesIn } from '../variables/index.ts';
import {
  orchestrationOnly,
  PIPELINE_SUFFIXES,
  PipelineFileError,
  type Pipeline,
  type VariableValue,
} from '../../contract/pipeline-file.ts';
import {
  checkPipeline,
  childPipelines,
  describeViolation,
  parsedFile,
  type ParsedFiles,
} from '../../contract/pipeline-checks.ts';
import { describeFinding, errorsBeforeRun, type Finding } from '../reviews/index.ts';
import { sqlGrammarOf } from '../../contract/sql-grammar.ts';
import type { WarehouseSpec } from '../../contract/work.ts';

const ORCHESTRATION = PIPELINE_SUFFIXES.orchestration;
const TEST_ORCHESTRATION = PIPELINE_SUFFIXES.test;
const TRANSFORMATION = PIPELINE_SUFFIXES.transformation;

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
  return (await artifactFilePaths(db, artifactId)).filter((path) => path.endsWith(ORCHESTRATION));
}

/**
 * The path of pipeline `name` (a path, with or without `.orch.yaml`) among `paths`, or a 404. A run names an
 * orchestration pipeline: a transformation pipeline's file is a 400 naming `field` (one runs only from an
 * orchestration pipeline's run-transformation component).
 */
function requirePipelinePath(paths: string[], name: string, field: string, what = 'Pipeline'): string {
  if (name.endsWith(TRANSFORMATION)) {
    throw badRequest(`"${name}" is a transformation pipeline: only orchestration pipelines (${ORCHESTRATION}) run.`, [
      `${field}: only orchestration pipelines run; "${name}" is a transformation pipeline (run it from one with run-transformation)`,
    ]);
  }
  const path = [name, `${name}${ORCHESTRATION}`].find((candidate) => paths.includes(candidate));
  if (!path) throw notFound(`${what} "${name}" is not an orchestration pipeline of this version.`);
  return path;
}

/**
 * The agent that runs the work: the one named (of the caller's account), else the environment's default,
 * else (when the server runs them) the account's platform-hosted agent.
 */
async function chooseAgent(
  db: Executor,
  accountId: string,
  named: string | undefined,
  environmentDefault: string | null,
  hosted: boolean,
) {
  const agentId = named ?? environmentDefault;
  if (agentId === null && hosted) return { agentId: await hostedAgentOf(db, accountId), agentType: HOSTED_TYPE };
  if (agentId === null) {
    throw badRequest('The environment has no default agent; name one.', [
      'agentId: required, the environment has no default agent',
    ]);
  }
  // The run is priced by its agent's type now (consumption), whatever becomes of the agent later.
  const { agentType } = await requireAgent(db, accountId, agentId);
  return { agentId, agentType };
}

/**
 * The pipeline files a run of `roots` can reach (orchestration and transformation), by path: the roots,
 * the children they name, theirs, and so on; all of the version's when one names its child through a
 * variable (known only when the run gets there). What the agent is sent, and what the checks read. Each
 * file read is parsed into `parsed`, which the checks and the review then read instead of parsing again.
 */
async function pipelineFilesRunBy(
  db: Executor,
  artifactId: number,
  roots: readonly string[],
  parsed: ParsedFiles,
): Promise<Record<string, string>> {
  const paths = new Set(
    (await artifactFilePaths(db, artifactId)).filter((path) => path.endsWith(ORCHESTRATION) || path.endsWith(TRANSFORMATION)),
  );
  const files = Object.create(null) as Record<string, string>;
  const waiting = [...roots];
  while (waiting.length > 0) {
    const path = waiting.pop()!;
    if (Object.hasOwn(files, path) || !paths.has(path)) continue;
    files[path] = await artifactFileText(db, artifactId, path);
    const children = childPipelines(path, files, paths, parsed);
    if (children.throughVariables) {
      waiting.length = 0;
      waiting.push(...paths);
    } else waiting.push(...children.paths);
  }
  return files;
}

/**
 * The pipeline at `path`, checked with the pipelines it runs: a file that is not a pipeline at all is a
 * 422; a graph that cannot run (an unknown target or source, a cycle, a missing parameter, a child not in
 * the artifact) is a 400 whose violations name the file, the component and the parameter. The files are
 * read from `parsed` (parsed there when missing).
 */
function parseOrRefuse(path: string, files: Record<string, string>, parsed: ParsedFiles): Pipeline {
  let violations;
  let pipeline: Pipeline;
  try {
    const entry = parsedFile(path, files, parsed);
    if (entry instanceof PipelineFileError) throw entry;
    pipeline = orchestrationOnly(entry);
    violations = checkPipeline(path, files, parsed);
  } catch (error) {
    if (error instanceof PipelineFileError && error.component === undefined) {
      throw new ProblemError(422, `Pipeline "${path}" cannot run: ${error.message}`);
    }
    if (error instanceof PipelineFileError) {
      violations = [{ file: path, component: error.component, parameter: error.parameter, message: error.message }];
    } else throw error;
  }
  if (violations.length > 0) {
    throw badRequest(
      `Pipeline "${path}" cannot run: ${describeViolation(violations[0])}${violations.length > 1 ? ` (and ${violations.length - 1} more)` : ''}.`,
      violations.map(describeViolation),
    );
  }
  return pipeline!;
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
): Promise<{ variables: Record<string, VariableValue | VariableValue[][]>; projectVariables: Set<string> }> {
  const project = await variableValuesIn(db, projectId, environmentId);
  // Keyed by user-chosen names: no prototype, so `__proto__` or `constructor` is a name like any other.
  const resolved = Object.create(null) as Record<string, VariableValue | VariableValue[][]>;
  const types = new Map<string, string>();
  for (const [name, variable] of Object.entries(declared)) types.set(name, variable.type);
  for (const row of project) {
    types.set(row.name, row.type);
    if (row.value !== null) resolved[row.name] = JSON.parse(row.value) as VariableValue;
  }
  const violations: string[] = [];
  for (const [name, value] of Object.entries(scalars)) {
    const type = types.get(name);
    if (type === undefined || type === 'GRID') violations.push(`scalarVariables.${name}: not a project variable`);
    else {
      // A NUMBER given as a numeric string ("1", as scripts send every value) is that number.
      const kept = valueOfType(type, value);
      if (kept === undefined)
        violations.push(`scalarVariables.${name}: must be a ${type === 'NUMBER' ? 'number' : 'string'} for a ${type} variable`);
      else resolved[name] = kept;
    }
  }
  for (const [name, rows] of Object.entries(grids)) {
    if (!Object.hasOwn(declared, name) || declared[name].type !== 'GRID')
      violations.push(`gridVariables.${name}: not a GRID variable of the pipeline`);
    else resolved[name] = rows;
  }
  if (violations.length > 0) throw badRequest('Some variables cannot be given to this run.', violations);
  return { variables: resolved, projectVariables: new Set(project.map((row) => row.name)) };
}

/**
 * The pipeline quality review's errors in `paths` and the pipelines they run refuse the run: a 400 naming
 * each finding's file, component, parameter and rule (warnings do not block; `POST …/reviews` lists them).
 */
/** Review errors named in a refused run's violations at most. */
const MAX_VIOLATIONS = 100;

async function refuseReviewErrors(
  paths: readonly string[],
  files: Record<string, string>,
  parsed: ParsedFiles,
  projectVariables: Set<string>,
  warehouse: WarehouseSettings | null,
): Promise<void> {
  // SQL is checked in the grammar of the environment's warehouse.
  const context = { projectVariables, sqlDialect: sqlGrammarOf(warehouse?.type) };
  const seen = new Set<string>();
  const found: Finding[] = [];
  for (const path of paths) for (const one of await errorsBeforeRun(path, files, context, parsed)) found.push(one);
  const errors = found.map(describeFinding).filter((line) => !seen.has(line) && seen.add(line));
  if (errors.length > 0) {
    // The violations name the first MAX_VIOLATIONS (a file can hold thousands; the review lists them).
    throw badRequest(
      `The pipeline cannot run: the review finds ${errors.length === 1 ? 'an error' : `${errors.length} errors`}: ${errors[0]}${errors.length > 1 ? ` (and ${errors.length - 1} more)` : ''}.`,
      errors.slice(0, MAX_VIOLATIONS),
    );
  }
}

/**
 * The warehouse a run of the environment uses, as the agent needs it: where to connect and which vault
 * secret holds the password (from the project connection the environment names). Undefined: the agent's
 * embedded DuckDB. A connection that does not exist or names no secret is a 400.
 */
async function warehouseFor(
  db: Executor,
  projectId: string,
  environmentId: string,
  settings: WarehouseSettings | null,
): Promise<WarehouseSpec | undefined> {
  if (settings === null) return undefined;
  const { connectionName, ...rest } = settings;
  if (connectionName === undefined) return rest;
  const secret = await connectionSecret(db, projectId, environmentId, connectionName);
  if (!secret) {
    throw badRequest(`The environment's warehouse names connection "${connectionName}", which names no secret.`, [
      `warehouse.connectionName: no connection "${connectionName}" with a secretName in this project`,
    ]);
  }
  return { ...rest, ...secret };
}

export interface RunRequest {
  accountId: string;
  projectId: string;
  environmentName: string;
  versionName?: string;
  agentId?: string;
  trigger: 'API' | 'SCHEDULE';
  /** Whether an environment without a default agent runs on the account's platform-hosted agent. */
  hostedAgent?: boolean;
  scheduleId?: string;
  scheduledFor?: string;
}

/** What a run needs that is read before its transaction: parsing a pipeline file is kept out of it. */
export interface PreparedRun {
  request: RunRequest;
  environment: { id: string; name: string };
  versionName: string;
  /** The environment's warehouse; absent, the agent's embedded one. */
  warehouse?: WarehouseSpec;
  /** The agent is the account's platform-hosted one. */
  hosted?: boolean;
  agentId: string;
  /** The agent's type as the run starts: what it is priced by. */
  agentType: string;
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
  const pipelineName = requirePipelinePath(await orchestrationPaths(db, artifact.id), request.pipelineName, 'body.pipelineName');
  // Each file the run reaches is parsed once, here, and read from this map by every check after.
  const parsed: ParsedFiles = new Map();
  const files = await pipelineFilesRunBy(db, artifact.id, [pipelineName], parsed);
  const pipeline = parseOrRefuse(pipelineName, files, parsed);
  const { agentId, agentType } = await chooseAgent(
    db,
    request.accountId,
    request.agentId,
    environment.defaultAgentId,
    request.hostedAgent === true,
  );
  const { variables, projectVariables } = await resolveVariables(
    db,
    request.projectId,
    environment.id,
    pipeline.variables,
    request.scalarVariables,
    request.gridVariables,
  );
  await refuseReviewErrors([pipelineName], files, parsed, projectVariables, environment.warehouse);
  const warehouse = await warehouseFor(db, request.projectId, environment.id, environment.warehouse);
  return {
    request,
    environment,
    versionName: artifact.versionName,
    agentId,
    agentType,
    ...(request.agentId === undefined && environment.defaultAgentId === null && { hosted: true }),
    ...(warehouse && { warehouse }),
    pipelines: files,
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
      ? 'body.testName: required for scope TEST'
      : request.scope === 'PIPELINE' && request.pipelineName === undefined
        ? 'body.pipelineName: required for scope PIPELINE'
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
      name.endsWith(TEST_ORCHESTRATION)
        ? name
        : `${name.endsWith(ORCHESTRATION) ? name.slice(0, -ORCHESTRATION.length) : name}${TEST_ORCHESTRATION}`,
      'body.testName',
      'Test',
    );
    tests = [testName];
  } else if (request.scope === 'PIPELINE') {
    pipelineName = requirePipelinePath(paths, request.pipelineName!, 'body.pipelineName');
    const stem = pipelineName.slice(0, -ORCHESTRATION.length);
    tests = allTests.filter((path) => path !== pipelineName && path.startsWith(stem));
  } else {
    tests = allTests;
  }
  if (tests.length === 0) throw notFound(`No test pipeline (a file ending in ${TEST_ORCHESTRATION}) is in this scope.`);
  const parsed: ParsedFiles = new Map();
  const pipelines = await pipelineFilesRunBy(db, artifact.id, tests, parsed);
  const { agentId, agentType } = await chooseAgent(
    db,
    request.accountId,
    request.agentId,
    environment.defaultAgentId,
    request.hostedAgent === true,
  );
  const { variables, projectVariables } = await resolveVariables(db, request.projectId, environment.id, {});
  await refuseReviewErrors(tests, pipelines, parsed, projectVariables, environment.warehouse);
  const warehouse = await warehouseFor(db, request.projectId, environment.id, environment.warehouse);
  return {
    request,
    environment,
    ...(warehouse && { warehouse }),
    ...(request.agentId === undefined && environment.defaultAgentId === null && { hosted: true }),
    versionName: artifact.versionName,
    agentId,
    agentType,
    pipelines,
    variables,
    tests,
    pipelineName,
    testName,
  };
}
