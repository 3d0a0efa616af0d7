import { createHash } from 'node:crypto';
import type { Db, Executor, Trx } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { pageOf } from '../../core/paging.ts';
import { badRequest } from '../../core/problems.ts';
import { LINEAGE_LIMITS, type LineageDataset, type StepLineage } from '../../contract/lineage.ts';
import {
  addLineageStep,
  insertLineageStep,
  endOpenChildRuns,
  insertRunEvent,
  pageLineageSteps,
  openRunsOfProject,
  deleteProjectLineage,
  endPassedTestRuns,
  type LineageStepRow,
} from './repository.ts';
import { pushesFrom, queueEventPushes, queuePush, queuePushes } from './push.ts';
import { recordsLineage } from './recording.ts';
import { MAX_WINDOW_DAYS, type LineageQuery } from './schemas.ts';
import { DAY_MS } from './days.ts';

const PRODUCER = 'https://platform-api.dev/agent';
const SCHEMA_URL = 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent';
/** The published version of each OpenLineage facet used, whose fields are what it holds here. */
const FACET_VERSIONS = {
  SchemaDatasetFacet: '1-0-0',
  ColumnLineageDatasetFacet: '1-0-1',
  SQLJobFacet: '1-0-1',
  JobTypeJobFacet: '2-0-3',
  ParentRunFacet: '1-1-0',
} as const;
/** An OpenLineage facet's BaseFacet fields: the producer, and the facet's published schema. */
const FACET = (name: keyof typeof FACET_VERSIONS) => ({
  _producer: PRODUCER,
  _schemaURL: `https://openlineage.io/spec/facets/${FACET_VERSIONS[name]}/${name}.json#/$defs/${name}`,
});
/** The step of a run (`dpc_step`): a custom facet, its schema the producer's. */
const STEP_FACET = {
  _producer: PRODUCER,
  _schemaURL: 'https://platform-api.dev/spec/facets/1-0-0/DpcStepRunFacet.json#/$defs/DpcStepRunFacet',
};

/** The job namespace of a project's pipelines, as the vendor's clients read it: `<scheme>://<accountId>.<projectId>`. */
export function jobNamespace(accountId: string, projectId: string): string {
  return `dpc://${accountId}.${projectId}`;
}

// ---- What an agent reports, checked

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function text(value: unknown, field: string, violations: string[]): value is string {
  if (typeof value === 'string' && value.length > 0 && value.length <= LINEAGE_LIMITS.text) return true;
  violations.push(`${field}: must be a string of 1 to ${LINEAGE_LIMITS.text} characters`);
  return false;
}

function datasetsOf(value: unknown, field: string, violations: string[]): LineageDataset[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.length > LINEAGE_LIMITS.datasets) {
    violations.push(`${field}: must be a list of at most ${LINEAGE_LIMITS.datasets} datasets`);
    return [];
  }
  return value.flatMap((item, i): LineageDataset[] => {
    const at = `${field}[${i}]`;
    if (!isObject(item)) {
      violations.push(`${at}: must be an object`);
      return [];
    }
    const ok = text(item.namespace, `${at}.namespace`, violations) && text(item.name, `${at}.name`, violations);
    const dataset: LineageDataset = { namespace: item.namespace as string, name: item.name as string };
    if (item.fields !== undefined) {
      if (!Array.isArray(item.fields) || item.fields.length > LINEAGE_LIMITS.fields) {
        violations.push(`${at}.fields: must be a list of at most ${LINEAGE_LIMITS.fields} columns`);
      } else {
        dataset.fields = item.fields.flatMap((column, j) => {
          if (!isObject(column)) {
            violations.push(`${at}.fields[${j}]: must be an object`);
            return [];
          }
          if (!text(column.name, `${at}.fields[${j}].name`, violations)) return [];
          if (column.type !== undefined && (typeof column.type !== 'string' || column.type.length > 255)) {
            violations.push(`${at}.fields[${j}].type: must be a string of at most 255 characters`);
            return [];
          }
          return [{ name: column.name as string, ...(column.type !== undefined && { type: column.type as string }) }];
        });
      }
    }
    if (item.columnLineage !== undefined) {
      if (!isObject(item.columnLineage) || Object.keys(item.columnLineage).length > LINEAGE_LIMITS.fields) {
        violations.push(`${at}.columnLineage: must map at most ${LINEAGE_LIMITS.fields} columns to their input columns`);
      } else {
        const lineage: Record<string, { namespace: string; name: string; field: string }[]> = Object.create(null);
        for (const [column, inputs] of Object.entries(item.columnLineage)) {
          const cat = `${at}.columnLineage.${column}`;
          if (!Array.isArray(inputs) || inputs.length > LINEAGE_LIMITS.fields) {
            violations.push(`${cat}: must be a list of input columns`);
            continue;
          }
          lineage[column] = inputs.flatMap((input, k) =>
            (isObject(input) || (violations.push(`${cat}[${k}]: must be an object`), false)) &&
            text(input.namespace, `${cat}[${k}].namespace`, violations) &&
            text(input.name, `${cat}[${k}].name`, violations) &&
            text(input.field, `${cat}[${k}].field`, violations)
              ? [{ namespace: input.namespace as string, name: input.name as string, field: input.field as string }]
              : [],
          );
        }
        dataset.columnLineage = lineage;
      }
    }
    return ok ? [dataset] : [];
  });
}

/**
 * The lineage a step report carries, checked field by field, as a copy holding only the fields StepLineage
 * names; 400 naming each field that is wrong. (The slow way: writtenLineage takes it only for a report
 * that is wrong or carries more than StepLineage names.)
 */
export function checkedLineage(value: unknown, field = 'body.body.step.lineage'): StepLineage {
  const violations: string[] = [];
  if (!isObject(value)) throw badRequest('The step lineage is not an object.', [`${field}: must be an object`]);
  const lineage: StepLineage = {
    inputs: datasetsOf(value.inputs, `${field}.inputs`, violations),
    outputs: datasetsOf(value.outputs, `${field}.outputs`, violations),
  };
  if (value.sql !== undefined) {
    if (typeof value.sql === 'string' && value.sql.length <= LINEAGE_LIMITS.sql) lineage.sql = value.sql;
    else violations.push(`${field}.sql: must be a string of at most ${LINEAGE_LIMITS.sql} characters`);
  }
  if (violations.length > 0) throw badRequest('The step lineage is not valid.', violations);
  return lineage;
}

const textFits = (value: unknown) => typeof value === 'string' && value.length > 0 && value.length <= LINEAGE_LIMITS.text;

/**
 * Whether a dataset is right (nothing allocated on the way). Fields StepLineage does not name may come
 * along: they are kept in the stored body as sent and never read (eventOf builds events from the named
 * fields only).
 */
function datasetFits(item: unknown): boolean {
  if (!isObject(item) || !textFits(item.namespace) || !textFits(item.name)) return false;
  const fields = item.fields;
  if (fields !== undefined) {
    if (!Array.isArray(fields) || fields.length > LINEAGE_LIMITS.fields) return false;
    for (let j = 0; j < fields.length; j += 1) {
      const column = fields[j];
      if (!isObject(column) || !textFits(column.name)) return false;
      const type = column.type;
      if (type !== undefined && (typeof type !== 'string' || type.length > 255)) return false;
    }
  }
  const columnLineage = item.columnLineage;
  if (columnLineage !== undefined) {
    if (!isObject(columnLineage)) return false;
    let columns = 0;
    for (const column in columnLineage) {
      if ((columns += 1) > LINEAGE_LIMITS.fields) return false;
      const inputs = columnLineage[column];
      if (!Array.isArray(inputs) || inputs.length > LINEAGE_LIMITS.fields) return false;
      for (let k = 0; k < inputs.length; k += 1) {
        const input = inputs[k];
        if (!isObject(input) || !textFits(input.namespace) || !textFits(input.name) || !textFits(input.field)) return false;
      }
    }
  }
  return true;
}

function datasetsFit(value: unknown): value is unknown[] {
  if (!Array.isArray(value) || value.length > LINEAGE_LIMITS.datasets) return false;
  for (let i = 0; i < value.length; i += 1) if (!datasetFits(value[i])) return false;
  return true;
}

/**
 * The lineage a step report carries as the JSON of StepLineage, and how many datasets it names; 400
 * naming each field that is wrong. This runs in the report's transaction (bench/lineage.ts): a report
 * that is right and has both lists (the agent's every report) is checked by a walk that allocates nothing
 * and serialised as it came; any other is checked and copied field by field (checkedLineage).
 */
export function writtenLineage(value: unknown, field = 'body.body.step.lineage'): { json: string; datasets: number } {
  if (fitsAsSent(value)) return { json: JSON.stringify(value), datasets: value.inputs.length + value.outputs.length };
  const lineage = checkedLineage(value, field);
  return { json: JSON.stringify(lineage), datasets: lineage.inputs.length + lineage.outputs.length };
}

/** Whether lineage is right as sent, with both lists (checked by a walk that allocates nothing). */
function fitsAsSent(value: unknown): value is { inputs: unknown[]; outputs: unknown[] } {
  return (
    isObject(value) &&
    datasetsFit(value.inputs) &&
    datasetsFit(value.outputs) &&
    (value.sql === undefined || (typeof value.sql === 'string' && value.sql.length <= LINEAGE_LIMITS.sql))
  );
}

/** A JSON text as JSON.parse reads it: what a value must hold for JSON.stringify to write that text again. */
class Fields {
  constructor(
    readonly keys: string[],
    readonly values: Shape[],
  ) {}
}
type Shape = string | number | boolean | null | Shape[] | Fields;

function shapeOf(parsed: unknown): Shape {
  if (Array.isArray(parsed)) return parsed.map(shapeOf);
  if (parsed !== null && typeof parsed === 'object') {
    const keys = Object.keys(parsed);
    return new Fields(
      keys,
      keys.map((key) => shapeOf((parsed as Record<string, unknown>)[key])),
    );
  }
  return parsed as string | number | boolean | null;
}

/**
 * Whether JSON.stringify(value) is the text `shape` was read from, found by a walk that allocates nothing:
 * the same plain objects with the same keys in the same order (the order JSON.stringify writes them in), the
 * same arrays, strings, numbers (0 and -0 are both written 0), booleans and nulls. Anything else (undefined,
 * a function, a class instance, a toJSON on a prototype) answers false, and the value is serialised instead.
 */
function writesAs(value: unknown, shape: Shape): boolean {
  if (shape instanceof Fields) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
    const prototype = Object.getPrototypeOf(value);
    if (prototype !== Object.prototype && prototype !== null) return false;
    const { keys, values } = shape;
    let i = 0;
    for (const key in value) {
      if (i === keys.length || key !== keys[i] || !writesAs((value as Record<string, unknown>)[key], values[i])) return false;
      i += 1;
    }
    return i === keys.length;
  }
  if (Array.isArray(shape)) {
    if (!Array.isArray(value) || Object.getPrototypeOf(value) !== Array.prototype || value.length !== shape.length) return false;
    for (let i = 0; i < shape.length; i += 1) if (!writesAs(value[i], shape[i])) return false;
    return true;
  }
  return value === shape;
}

/** A body recorded lately: its text, hash and how many datasets it names, and its shape to compare reports with. */
interface RecentBody {
  json: string;
  hash: string;
  datasets: number;
  shape: Shape;
}

/**
 * The last body of each step recorded lately (by project, job and step index): a step reports the same
 * datasets run after run. A report that writes as that body (writesAs: the same text JSON.stringify would
 * write) takes its text and hash as they are, without checking, serialising and hashing ~1 KB again
 * (bench/lineage.ts: about 20 µs of a report's transaction). It is right as that body was: the check
 * (fitsAsSent) reads only what the JSON text holds, and what is stored is that text. Only bodies that were
 * right as sent are kept (a report copied field by field, checkedLineage, is not: it does not write as its copy).
 */
const recentBodies = new Map<string, RecentBody>();
const RECENT_BODIES_KEPT = 5000;

/** The lineage a step report carries, as recorded (writtenLineage), with its hash. */
function stepBody(at: LineageStep, reported: unknown): { json: string; hash: string; datasets: number } {
  const key = `${at.projectId}\u0000${at.pipelineName}\u0000${at.step.index}`;
  const recent = recentBodies.get(key);
  // The same data as a body that was checked is right too (the check reads nothing JSON does not hold).
  if (recent !== undefined && writesAs(reported, recent.shape)) return recent;
  if (!fitsAsSent(reported)) {
    const { json, datasets } = writtenLineage(reported);
    return { json, hash: hashOf(json), datasets };
  }
  const json = JSON.stringify(reported);
  const body = {
    json,
    hash: hashOf(json),
    datasets: reported.inputs.length + reported.outputs.length,
    shape: shapeOf(JSON.parse(json)),
  };
  if (recentBodies.size >= RECENT_BODIES_KEPT) recentBodies.clear();
  recentBodies.set(key, body);
  return body;
}

/** A body's hash, as its key among the project's bodies. */
function hashOf(body: string): string {
  return createHash('sha256').update(body).digest('base64url');
}

// ---- Events

function datasetOf(dataset: LineageDataset, output: boolean) {
  const facets: Record<string, unknown> = {};
  if (dataset.fields?.length) {
    facets.schema = {
      ...FACET('SchemaDatasetFacet'),
      fields: dataset.fields.map(({ name, type }) => (type === undefined ? { name } : { name, type })),
    };
  }
  if (output && dataset.columnLineage && Object.keys(dataset.columnLineage).length > 0) {
    facets.columnLineage = {
      ...FACET('ColumnLineageDatasetFacet'),
      fields: Object.fromEntries(
        Object.entries(dataset.columnLineage).map(([column, inputs]) => [
          column,
          { inputFields: inputs.map(({ namespace, name, field }) => ({ namespace, name, field })) },
        ]),
      ),
    };
  }
  return { namespace: dataset.namespace, name: dataset.name, ...(Object.keys(facets).length > 0 && { facets }) };
}

export interface LineageStep {
  accountId: string;
  projectId: string;
  executionId: string;
  /** The run's own pipeline: the execution's job (default: pipelineName). */
  rootJobName?: string;
  /** The pipeline the step belongs to (the job of its events): the run's own, or a child pipeline the run holds. */
  pipelineName: string;
  step: {
    index: number;
    name: string;
    status: string;
    /** A step of a child pipeline: the step that runs that pipeline (whose run the step is part of). */
    parentStep?: number;
    /** A step that runs a child pipeline (run-orchestration, run-transformation): that pipeline. */
    runsPipeline?: string;
  };
}

/** A child run's parent run and job, and the execution's job at the root (lineage_steps.parent, JSON). */
interface ChildRunParent {
  runId: string;
  job: string;
  rootJob: string;
}

/**
 * The OpenLineage run id of a child pipeline's run: the UUID v5 of `key` in the execution id's namespace
 * (RFC 9562), so that it is the same whenever it is worked out, and no other execution's.
 */
function childRunId(executionId: string, key: string): string {
  const namespace = Buffer.from(executionId.replace(/-/g, ''), 'hex');
  const bytes = createHash('sha1').update(namespace).update(key, 'utf8').digest().subarray(0, 16);
  bytes[6] = (bytes[6] & 0x0f) | 0x50;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The run of the child pipeline that step `index` of the execution runs. */
const runOfStepAt = (executionId: string, index: number) => childRunId(executionId, `step:${index}`);

/**
 * The run a step is part of: the execution's own, the run of the child pipeline its parentStep runs, or, for
 * a step of a child pipeline that names no step running it (a test run's test pipelines, an agent that reports
 * only childPipeline), that pipeline's one run in the execution (keyed by its path).
 */
function runOfStep(at: LineageStep): { runId: string; pipelineKeyed: boolean } {
  if (at.step.parentStep !== undefined) return { runId: runOfStepAt(at.executionId, at.step.parentStep), pipelineKeyed: false };
  if (at.pipelineName !== (at.rootJobName ?? at.pipelineName)) {
    return { runId: childRunId(at.executionId, `pipeline:${at.pipelineName}`), pipelineKeyed: true };
  }
  return { runId: at.executionId, pipelineKeyed: false };
}

/** The body of a run-level event: no datasets (a run's datasets are its steps' events). */
const NO_DATASETS = JSON.stringify({ inputs: [], outputs: [] });
const NO_DATASETS_HASH = hashOf(NO_DATASETS);

/** The end event of a run that ended with `status` (a step's, or an execution's). */
function endEventOf(status: string): 'COMPLETE' | 'FAIL' | 'ABORT' {
  return status === 'SUCCESS' ? 'COMPLETE' : status === 'CANCELLED' ? 'ABORT' : 'FAIL';
}

interface RunEvent {
  accountId: string;
  projectId: string;
  executionId: string;
  jobName: string;
  /** The step that runs the child pipeline; -1 for the execution's own run and a child run keyed by its pipeline. */
  stepIndex: number;
  eventType: 'START' | 'COMPLETE' | 'FAIL' | 'ABORT';
  /** When it happened, by the server's clock. */
  eventTime: string;
  runId: string;
  parent: string | null;
}

/** Records a run-level event unless the run has its START (or an end) already (queued for the push when there is one). */
async function storeRunEvent(db: Executor, event: RunEvent): Promise<void> {
  const id = await insertRunEvent(
    db,
    {
      accountId: event.accountId,
      projectId: event.projectId,
      executionId: event.executionId,
      generatedAt: now(),
      eventTime: event.eventTime,
      jobName: event.jobName,
      jobKind: 'RUN',
      stepIndex: event.stepIndex,
      stepName: '',
      stepStatus: event.eventType,
      bodyHash: NO_DATASETS_HASH,
      runId: event.runId,
      parent: event.parent,
      runPhase: event.eventType === 'START' ? 'START' : 'END',
    },
    NO_DATASETS,
  );
  if (id !== undefined) await queuePush(db, id);
}

/** A batch run starts (the execution is created): its START, in the transaction that creates it. */
export async function recordRunStart(
  db: Executor,
  run: { accountId: string; projectId: string; executionId: string; jobName: string; startedAt: string },
): Promise<void> {
  if (!recordsLineage(db)) return;
  await storeRunEvent(db, {
    ...run,
    stepIndex: -1,
    eventType: 'START',
    eventTime: run.startedAt,
    runId: run.executionId,
    parent: null,
  });
}

/**
 * A batch run ends with `status` (the execution's final one), in the transaction that ends it: each child
 * pipeline's run it leaves started and not ended (a step running one was never reported ended: a forced cancel,
 * an agent lost; a test pipeline's run) ends as the execution did, all in one statement, and then the run itself.
 * A run with no START (it was started before migration 0046) gets its START first.
 */
export async function recordRunEnd(
  db: Executor,
  run: {
    accountId: string;
    projectId: string;
    executionId: string;
    jobName: string;
    status: string;
    startedAt: string;
    finishedAt: string;
    /** A failed test run's test pipelines that failed, each having run to its end: the others' runs COMPLETE. */
    failedPipelines?: string[];
  },
): Promise<void> {
  if (!recordsLineage(db)) return;
  const { failedPipelines, ...ended } = run;
  const own = { ...ended, stepIndex: -1, runId: run.executionId, parent: null };
  const eventType = endEventOf(run.status);
  // Its START, unless it has one (the unique index of run events: the insert finds it and does nothing).
  await storeRunEvent(db, { ...own, eventType: 'START', eventTime: run.startedAt });
  if (failedPipelines) await queuePushes(db, await endPassedTestRuns(db, run.executionId, failedPipelines, run.finishedAt));
  await queuePushes(db, await endOpenChildRuns(db, run.executionId, eventType, run.finishedAt));
  await storeRunEvent(db, { ...own, eventType, eventTime: run.finishedAt });
}

/**
 * What a step report means for lineage, in the transaction that records the step:
 * - a step of a child pipeline that names the step running it (parentStep) is part of that step's child run
 *   (the executions area checks that the step runs this pipeline);
 * - a step of a child pipeline that names no step running it starts that pipeline's run in the execution
 *   (once: its end comes with the execution's, recordRunEnd);
 * - a step that runs a child pipeline (`runsPipeline`) starts that pipeline's run when it is first reported
 *   with it, and ends it (COMPLETE, FAIL, ABORT) the first time it is reported ended: a run of its own, with
 *   the parent run facet naming the step's run and job, and the execution's at the root (the executions area
 *   checks that a step runs one pipeline); a second end is not recorded;
 * - the datasets the step read and wrote (`reported`, when it carries lineage) are a RUNNING event of its run:
 *   a small row (run, job, step, time) and the datasets as checked, kept once per project and content (a
 *   step reports the same tables run after run); the OpenLineage event is built when it is read (eventOf). A
 *   step that read and wrote nothing records no event.
 * The account, project, jobs and runs come from the execution the reporting agent holds, never from the
 * report (the executions area checks that the pipelines a step names are the work's), and the events' times are
 * the server's.
 */
export async function recordStepLineage(db: Executor, at: LineageStep, reported?: unknown): Promise<void> {
  if (!recordsLineage(db)) return;
  const rootJob = at.rootJobName ?? at.pipelineName;
  const run = runOfStep(at);
  const ids = { accountId: at.accountId, projectId: at.projectId, executionId: at.executionId };
  if (run.pipelineKeyed) {
    await storeRunEvent(db, {
      ...ids,
      jobName: at.pipelineName,
      stepIndex: -1,
      eventType: 'START',
      eventTime: now(),
      runId: run.runId,
      parent: JSON.stringify({ runId: at.executionId, job: rootJob, rootJob } satisfies ChildRunParent),
    });
  }
  const child = at.step.runsPipeline;
  if (child !== undefined && at.step.status !== 'SKIPPED') {
    const childRun = {
      ...ids,
      jobName: child,
      stepIndex: at.step.index,
      runId: runOfStepAt(at.executionId, at.step.index),
      parent: JSON.stringify({ runId: run.runId, job: at.pipelineName, rootJob } satisfies ChildRunParent),
    };
    // Once, whichever report of the step comes first (an agent may report it only when it ends).
    await storeRunEvent(db, { ...childRun, eventType: 'START', eventTime: now() });
    if (at.step.status !== 'RUNNING') {
      await storeRunEvent(db, { ...childRun, eventType: endEventOf(at.step.status), eventTime: now() });
    }
  }
  if (reported === undefined) return;
  const { json: body, hash, datasets } = stepBody(at, reported);
  if (datasets === 0) return;
  const generatedAt = now();
  await storeStep(
    db,
    {
      accountId: at.accountId,
      projectId: at.projectId,
      executionId: at.executionId,
      generatedAt,
      eventTime: generatedAt,
      jobName: at.pipelineName,
      jobKind: 'STEP',
      stepIndex: at.step.index,
      stepName: at.step.name,
      stepStatus: at.step.status,
      bodyHash: hash,
      runId: run.runId === at.executionId ? null : run.runId,
      parent: null,
      runPhase: null,
    },
    body,
  );
}

/** A step's row and body; queued for the push when there is one (which needs the row's id). */
async function storeStep(db: Executor, row: LineageStepRow, body: string): Promise<void> {
  if (!pushesFrom(db)) return addLineageStep(db, row, body);
  await queuePush(db, await insertLineageStep(db, row, body));
}

export interface StreamingLineage {
  accountId: string;
  projectId: string;
  /** The run: the id of the agent work that runs it (a UUID). */
  runId: string;
  /** The streaming pipeline's name. */
  jobName: string;
  eventType: 'START' | 'RUNNING' | 'COMPLETE' | 'FAIL' | 'ABORT';
  /** The source tables and the target datasets they are written to, as the server names them from the definition. */
  inputs: LineageDataset[];
  outputs: LineageDataset[];
}

/**
 * Records an OpenLineage event of a streaming pipeline's run: source tables → target files or tables. The
 * datasets are the server's (named from the pipeline's definition), never an agent's word.
 */
export async function recordStreamingLineage(db: Executor, at: StreamingLineage): Promise<void> {
  if (!recordsLineage(db)) return;
  if (at.inputs.length === 0 && at.outputs.length === 0) return;
  const body = JSON.stringify({ inputs: at.inputs, outputs: at.outputs });
  const generatedAt = now();
  await storeStep(
    db,
    {
      accountId: at.accountId,
      projectId: at.projectId,
      executionId: at.runId,
      generatedAt,
      eventTime: generatedAt,
      jobName: at.jobName,
      jobKind: 'STREAMING',
      stepIndex: 0,
      stepName: '',
      stepStatus: at.eventType,
      bodyHash: hashOf(body),
      runId: null,
      parent: null,
      runPhase: null,
    },
    body,
  );
}

const BATCH_JOB = { ...FACET('JobTypeJobFacet'), processingType: 'BATCH', integration: 'DPC', jobType: 'PIPELINE' };

/** The event type of a step recorded before migration 0046 (job kind PIPELINE): read from its status, as it was. */
const legacyEventType = (status: string) => (status === 'SUCCESS' ? 'COMPLETE' : status === 'RUNNING' ? 'RUNNING' : 'FAIL');

/** The parent run facet of a child pipeline's run: the run and job that ran it, and the execution's at the root. */
function parentFacet(namespace: string, executionId: string, stored: string) {
  const parent = JSON.parse(stored) as ChildRunParent;
  return {
    ...FACET('ParentRunFacet'),
    run: { runId: parent.runId },
    job: { namespace, name: parent.job },
    root: { run: { runId: executionId }, job: { namespace, name: parent.rootJob } },
  };
}

const STREAMING_JOB = {
  ...FACET('JobTypeJobFacet'),
  processingType: 'STREAMING',
  integration: 'DPC',
  jobType: 'STREAMING_PIPELINE',
};

/** The OpenLineage RunEvent of a recorded row (a run's start or end, a step, a streaming run) and its datasets. */
export function eventOf(step: Omit<LineageStepRow, 'bodyHash' | 'runPhase'>, lineage: StepLineage) {
  const namespace = jobNamespace(step.accountId, step.projectId);
  const event = (eventType: string, run: Record<string, unknown>, jobFacets: Record<string, unknown>) => ({
    eventType,
    eventTime: step.eventTime,
    producer: PRODUCER,
    schemaURL: SCHEMA_URL,
    run,
    job: { namespace, name: step.jobName, facets: jobFacets },
    inputs: lineage.inputs.map((dataset) => datasetOf(dataset, false)),
    outputs: lineage.outputs.map((dataset) => datasetOf(dataset, true)),
  });
  if (step.jobKind === 'STREAMING') return event(step.stepStatus, { runId: step.executionId }, { jobType: STREAMING_JOB });
  const runId = step.runId ?? step.executionId;
  if (step.jobKind === 'RUN') {
    const parent = step.parent === null ? undefined : parentFacet(namespace, step.executionId, step.parent);
    return event(step.stepStatus, { runId, ...(parent && { facets: { parent } }) }, { jobType: BATCH_JOB });
  }
  return event(
    step.jobKind === 'STEP' ? 'RUNNING' : legacyEventType(step.stepStatus),
    {
      runId,
      facets: {
        dpc_step: { ...STEP_FACET, index: step.stepIndex, name: step.stepName, status: step.stepStatus },
      },
    },
    { jobType: BATCH_JOB, ...(lineage.sql !== undefined && { sql: { ...FACET('SQLJobFacet'), query: lineage.sql } }) },
  );
}

/** Whether the YYYY-MM-DD that `iso` begins with is a day of the calendar (Date.parse takes 2026-02-30 as March 2nd). */
function isCalendarDate(iso: string): boolean {
  const [year, month, day] = iso.slice(0, 10).split('-').map(Number);
  // setUTCFullYear, not Date.UTC: Date.UTC takes years 0 to 99 as 1900 to 1999.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

/** An instant as the query gives it: a date-time (UTC without an offset) or a date (its midnight UTC). */
function instantOf(value: string, field: string): number {
  const iso = /^\d{4}-\d{2}-\d{2}$/.test(value)
    ? `${value}T00:00:00Z`
    : /^\d{4}-\d{2}-\d{2}T[\d:.]+$/.test(value)
      ? `${value}Z`
      : value;
  const ms = /^\d{4}-\d{2}-\d{2}T/.test(iso) && isCalendarDate(iso) ? Date.parse(iso) : NaN;
  if (Number.isNaN(ms))
    throw badRequest('The time is not ISO 8601.', [`querystring.${field}: must be an ISO 8601 date-time or date`]);
  return ms;
}

/**
 * A project's lineage goes with it, in its deleting transaction (the rows hold the project without a foreign
 * key). Where events are pushed to an OpenLineage endpoint, each run the project had going (a START, no end)
 * is first ended there with an ABORT: its rows go, so the job carries the event itself.
 */
export async function deleteLineageOfProject(trx: Trx, accountId: string, projectId: string): Promise<void> {
  if (pushesFrom(trx)) {
    const at = now();
    const open = await openRunsOfProject(trx, accountId, projectId);
    await queueEventPushes(
      trx,
      open.map((row) =>
        eventOf({ ...row, stepStatus: 'ABORT', generatedAt: at, eventTime: at }, JSON.parse(row.body) as StepLineage),
      ),
    );
  }
  await deleteProjectLineage(trx, accountId, projectId);
}

/** A page of the account's lineage events recorded in the window (at most 31 days). */
export async function listLineageEvents(db: Db, accountId: string, query: LineageQuery) {
  const before = query.generatedBefore === undefined ? Date.now() : instantOf(query.generatedBefore, 'generatedBefore');
  const from =
    query.generatedFrom === undefined ? before - MAX_WINDOW_DAYS * DAY_MS : instantOf(query.generatedFrom, 'generatedFrom');
  if (from > before) throw badRequest('The window is empty.', ['querystring.generatedBefore: must not be before generatedFrom']);
  if (before - from > MAX_WINDOW_DAYS * DAY_MS) {
    throw badRequest(`The window is longer than ${MAX_WINDOW_DAYS} days.`, [
      `querystring.generatedFrom: at most ${MAX_WINDOW_DAYS} days before generatedBefore`,
    ]);
  }
  const { rows, total } = await pageLineageSteps(db, accountId, from, before, query);
  // A page's steps share few bodies (the same steps of many runs): each is parsed once.
  const bodies = new Map<string, StepLineage>();
  const bodyOf = (row: (typeof rows)[number]) => {
    let lineage = bodies.get(row.bodyHash);
    if (!lineage) bodies.set(row.bodyHash, (lineage = JSON.parse(row.body) as StepLineage));
    return lineage;
  };
  return pageOf(
    query,
    rows.map((row) => ({ id: String(row.id), event: eventOf(row, bodyOf(row)) as Record<string, unknown> })),
    total,
  );
}
