import { createHash } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { pageOf } from '../../core/paging.ts';
import { badRequest } from '../../core/problems.ts';
import { LINEAGE_LIMITS, type LineageDataset, type StepLineage } from '../../contract/lineage.ts';
import { addLineageStep, insertLineageStep, pageLineageSteps, type LineageStepRow } from './repository.ts';
import { pushesFrom, queuePush } from './push.ts';
import { MAX_WINDOW_DAYS, type LineageQuery } from './schemas.ts';

const PRODUCER = 'https://platform-api.dev/agent';
const SCHEMA_URL = 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent';
const FACET = (name: string) => ({ _producer: PRODUCER, _schemaURL: `https://openlineage.io/spec/facets/1-0-0/${name}.json` });

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
  /** The pipeline's path (the job's name). */
  pipelineName: string;
  step: { index: number; name: string; status: string; finishedAt?: string };
}

/**
 * Records the lineage of a step that reported datasets, in the transaction that records the step: a small
 * row (run, job, step, time) and the datasets as checked, kept once per project and content (a step
 * reports the same tables run after run). The OpenLineage event is built when it is read (eventOf). The
 * account, project, job and run come from the execution the reporting agent holds, never from the report.
 * A step that read and wrote nothing records nothing.
 */
export async function recordStepLineage(db: Executor, at: LineageStep, reported: unknown): Promise<void> {
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
      eventTime: at.step.finishedAt ?? generatedAt,
      jobName: at.pipelineName,
      jobKind: 'PIPELINE',
      stepIndex: at.step.index,
      stepName: at.step.name,
      stepStatus: at.step.status,
      bodyHash: hash,
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
    },
    body,
  );
}

/** The OpenLineage RunEvent of a recorded step (or streaming run) and its datasets. */
export function eventOf(step: Omit<LineageStepRow, 'bodyHash'>, lineage: StepLineage) {
  if (step.jobKind === 'STREAMING') {
    return {
      eventType: step.stepStatus,
      eventTime: step.eventTime,
      producer: PRODUCER,
      schemaURL: SCHEMA_URL,
      run: { runId: step.executionId },
      job: {
        namespace: jobNamespace(step.accountId, step.projectId),
        name: step.jobName,
        facets: {
          jobType: {
            ...FACET('JobTypeJobFacet'),
            processingType: 'STREAMING',
            integration: 'DPC',
            jobType: 'STREAMING_PIPELINE',
          },
        },
      },
      inputs: lineage.inputs.map((dataset) => datasetOf(dataset, false)),
      outputs: lineage.outputs.map((dataset) => datasetOf(dataset, true)),
    };
  }
  return {
    eventType: step.stepStatus === 'SUCCESS' ? 'COMPLETE' : step.stepStatus === 'RUNNING' ? 'RUNNING' : 'FAIL',
    eventTime: step.eventTime,
    producer: PRODUCER,
    schemaURL: SCHEMA_URL,
    run: {
      runId: step.executionId,
      facets: {
        dpc_step: { ...FACET('DpcStepRunFacet'), index: step.stepIndex, name: step.stepName, status: step.stepStatus },
      },
    },
    job: {
      namespace: jobNamespace(step.accountId, step.projectId),
      name: step.jobName,
      facets: {
        jobType: { ...FACET('JobTypeJobFacet'), processingType: 'BATCH', integration: 'DPC', jobType: 'PIPELINE' },
        ...(lineage.sql !== undefined && { sql: { ...FACET('SQLJobFacet'), query: lineage.sql } }),
      },
    },
    inputs: lineage.inputs.map((dataset) => datasetOf(dataset, false)),
    outputs: lineage.outputs.map((dataset) => datasetOf(dataset, true)),
  };
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

const DAY_MS = 86_400_000;

/** A page of the account's lineage events recorded in the window (at most 31 days). */
export async function listLineageEvents(db: Executor, accountId: string, query: LineageQuery) {
  const before = query.generatedBefore === undefined ? Date.now() : instantOf(query.generatedBefore, 'generatedBefore');
  const from =
    query.generatedFrom === undefined ? before - MAX_WINDOW_DAYS * DAY_MS : instantOf(query.generatedFrom, 'generatedFrom');
  if (from > before) throw badRequest('The window is empty.', ['querystring.generatedBefore: must not be before generatedFrom']);
  if (before - from > MAX_WINDOW_DAYS * DAY_MS) {
    throw badRequest(`The window is longer than ${MAX_WINDOW_DAYS} days.`, [
      `querystring.generatedFrom: at most ${MAX_WINDOW_DAYS} days before generatedBefore`,
    ]);
  }
  const { rows, total } = await pageLineageSteps(
    db,
    accountId,
    new Date(from).toISOString(),
    new Date(before).toISOString(),
    query,
  );
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
