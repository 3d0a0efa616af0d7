import assert from 'node:assert/strict';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

/**
 * The OpenLineage RunEvent as its JSON schema (https://openlineage.io/spec/2-0-2/OpenLineage.json) defines
 * it, written out here for the tests: required run, job, eventTime, producer and schemaURL; eventType of
 * the spec's enum; runId a UUID; every facet a BaseFacet (`_producer` and `_schemaURL`, URIs); datasets
 * with namespace and name. The column-lineage, schema and parent run (1-1-0, with its root) facets as their
 * facet schemas define them.
 */
const facet = {
  type: 'object',
  required: ['_producer', '_schemaURL'],
  properties: { _producer: { type: 'string', format: 'uri' }, _schemaURL: { type: 'string', format: 'uri' } },
};
const facets = { type: 'object', additionalProperties: facet };
const schemaFacet = {
  allOf: [facet],
  properties: {
    fields: {
      type: 'array',
      items: { type: 'object', required: ['name'], properties: { name: { type: 'string' }, type: { type: 'string' } } },
    },
  },
};
const columnLineageFacet = {
  allOf: [facet],
  required: ['fields'],
  properties: {
    fields: {
      type: 'object',
      additionalProperties: {
        type: 'object',
        required: ['inputFields'],
        properties: {
          inputFields: {
            type: 'array',
            items: {
              type: 'object',
              required: ['namespace', 'name', 'field'],
              properties: { namespace: { type: 'string' }, name: { type: 'string' }, field: { type: 'string' } },
            },
          },
        },
      },
    },
  },
};
const dataset = {
  type: 'object',
  required: ['namespace', 'name'],
  properties: {
    namespace: { type: 'string' },
    name: { type: 'string' },
    facets: { ...facets, properties: { schema: schemaFacet, columnLineage: columnLineageFacet } },
  },
};
const runRef = { type: 'object', required: ['runId'], properties: { runId: { type: 'string', format: 'uuid' } } };
const jobRef = {
  type: 'object',
  required: ['namespace', 'name'],
  properties: { namespace: { type: 'string' }, name: { type: 'string' } },
};
/** ParentRunFacet 1-1-0: the parent run and job, and optionally the root's. */
const parentRunFacet = {
  allOf: [facet],
  required: ['run', 'job'],
  properties: {
    run: runRef,
    job: jobRef,
    root: { type: 'object', required: ['run', 'job'], properties: { run: runRef, job: jobRef } },
  },
};
const RUN_EVENT = {
  type: 'object',
  required: ['run', 'job', 'eventTime', 'producer', 'schemaURL'],
  properties: {
    eventType: { enum: ['START', 'RUNNING', 'COMPLETE', 'ABORT', 'FAIL', 'OTHER'] },
    eventTime: { type: 'string', format: 'date-time' },
    producer: { type: 'string', format: 'uri' },
    schemaURL: { type: 'string', format: 'uri' },
    run: {
      type: 'object',
      required: ['runId'],
      properties: { runId: { type: 'string', format: 'uuid' }, facets: { ...facets, properties: { parent: parentRunFacet } } },
    },
    job: {
      type: 'object',
      required: ['namespace', 'name'],
      properties: { namespace: { type: 'string' }, name: { type: 'string' }, facets },
    },
    inputs: { type: 'array', items: dataset },
    outputs: { type: 'array', items: dataset },
  },
};

const ajv = new Ajv2020({ strict: false, allErrors: true });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validate = ajv.compile(RUN_EVENT);

/** Fails the test unless `event` is an OpenLineage RunEvent. */
export function assertRunEvent(event: unknown): void {
  assert.ok(validate(event), `not an OpenLineage RunEvent: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(event)}`);
}
