import type { Executor } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { pageOf } from '../../core/paging.ts';
import { badRequest } from '../../core/problems.ts';
import { LINEAGE_LIMITS, type LineageDataset, type StepLineage } from '../../contract/lineage.ts';
import { insertLineageEvent, pageLineageEvents } from './repository.ts';
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
          if (!isObject(column) || !text(column.name, `${at}.fields[${j}].name`, violations)) return [];
          return [{ name: column.name as string, ...(typeof column.type === 'string' && { type: column.type.slice(0, 255) }) }];
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
            isObject(input) &&
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

/** The lineage a step report carries, checked field by field; 400 naming each field that is wrong. */
export function checkedLineage(value: unknown, field = 'body.step.lineage'): StepLineage {
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

// ---- Events

function datasetOf(dataset: LineageDataset, output: boolean) {
  const facets: Record<string, unknown> = {};
  if (dataset.fields?.length) facets.schema = { ...FACET('SchemaDatasetFacet'), fields: dataset.fields };
  if (output && dataset.columnLineage && Object.keys(dataset.columnLineage).length > 0) {
    facets.columnLineage = {
      ...FACET('ColumnLineageDatasetFacet'),
      fields: Object.fromEntries(Object.entries(dataset.columnLineage).map(([column, inputFields]) => [column, { inputFields }])),
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
 * Records the OpenLineage run event of a step that reported datasets, in the transaction that records
 * the step. The account, project, job and run come from the execution the reporting agent holds, never
 * from the report. A step that read and wrote nothing records nothing.
 */
export async function recordStepLineage(db: Executor, at: LineageStep, reported: unknown): Promise<void> {
  const lineage = checkedLineage(reported);
  if (lineage.inputs.length === 0 && lineage.outputs.length === 0) return;
  const generatedAt = now();
  const event = {
    eventType: at.step.status === 'SUCCESS' ? 'COMPLETE' : at.step.status === 'RUNNING' ? 'RUNNING' : 'FAIL',
    eventTime: at.step.finishedAt ?? generatedAt,
    producer: PRODUCER,
    schemaURL: SCHEMA_URL,
    run: {
      runId: at.executionId,
      facets: { dpc_step: { ...FACET('DpcStepRunFacet'), index: at.step.index, name: at.step.name, status: at.step.status } },
    },
    job: {
      namespace: jobNamespace(at.accountId, at.projectId),
      name: at.pipelineName,
      facets: {
        jobType: { ...FACET('JobTypeJobFacet'), processingType: 'BATCH', integration: 'DPC', jobType: 'PIPELINE' },
        ...(lineage.sql !== undefined && { sql: { ...FACET('SQLJobFacet'), query: lineage.sql } }),
      },
    },
    inputs: lineage.inputs.map((dataset) => datasetOf(dataset, false)),
    outputs: lineage.outputs.map((dataset) => datasetOf(dataset, true)),
  };
  await insertLineageEvent(db, {
    accountId: at.accountId,
    projectId: at.projectId,
    executionId: at.executionId,
    generatedAt,
    event: JSON.stringify(event),
  });
}

/** An instant as the query gives it: a date-time (UTC without an offset) or a date (its midnight UTC). */
function instantOf(value: string, field: string): number {
  const iso = /^\d{4}-\d{2}-\d{2}$/.test(value)
    ? `${value}T00:00:00Z`
    : /^\d{4}-\d{2}-\d{2}T[\d:.]+$/.test(value)
      ? `${value}Z`
      : value;
  const ms = /^\d{4}-\d{2}-\d{2}T/.test(iso) ? Date.parse(iso) : NaN;
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
  const { rows, total } = await pageLineageEvents(
    db,
    accountId,
    new Date(from).toISOString(),
    new Date(before).toISOString(),
    query,
  );
  return pageOf(
    query,
    rows.map((row) => ({ id: String(row.id), event: JSON.parse(row.event) as Record<string, unknown> })),
    total,
  );
}
