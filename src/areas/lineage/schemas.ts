import { Type, type Static } from 'typebox';
import { Page, PageQuery } from '../../core/paging.ts';

/** Longest window one request reads, in days. */
export const MAX_WINDOW_DAYS = 31;

const INSTANT = 'ISO 8601: a date-time (UTC when it names no offset) or a date (its midnight, UTC)';
const instant = (description: string) => Type.String({ minLength: 10, maxLength: 40, description: `${INSTANT}; ${description}` });

export const LineageQuery = Type.Object({
  ...PageQuery.properties,
  generatedFrom: Type.Optional(instant(`inclusive; default: ${MAX_WINDOW_DAYS} days before generatedBefore`)),
  generatedBefore: Type.Optional(instant('exclusive; default: now')),
});
export type LineageQuery = Static<typeof LineageQuery>;

const exampleEvent = {
  eventType: 'COMPLETE',
  eventTime: '2026-11-25T10:00:03.000Z',
  producer: 'https://platform-api.dev/agent',
  schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
  run: { runId: '6f1c0e9a-3b7d-4c2e-9a51-0d4e8b7f2a10' },
  job: { namespace: 'dpc://5f0c….5b1a…', name: 'marts/orders.tran.yaml' },
  inputs: [{ namespace: 'postgres://db.internal:5432', name: 'shop.public.orders' }],
  outputs: [{ namespace: 'postgres://db.internal:5432', name: 'shop.marts.daily_orders' }],
};

export const LineageEvent = Type.Object(
  {
    id: Type.String({ description: 'the event id: its place in the order events were recorded' }),
    event: Type.Record(Type.String(), Type.Unknown(), {
      description:
        "an OpenLineage 1.x RunEvent: job.namespace dpc://<accountId>.<projectId>, job.name the pipeline's path; a run's START and its end (COMPLETE, FAIL, ABORT), and a RUNNING event per step that read or wrote data (the step in run.facets.dpc_step); run.runId the execution id, or for a child pipeline's run a UUID of its own with run.facets.parent naming the run and job that ran it and the execution at the root",
    }),
  },
  { examples: [{ id: '42', event: exampleEvent }] },
);

export const LineagePage = Page(LineageEvent);
