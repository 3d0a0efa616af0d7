import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Migrator, type Kysely } from 'kysely';
import { migrate, openStore } from '../../src/core/db/database.ts';
import { migrationsFor } from '../../src/core/db/migrations/index.ts';
import { createAccount } from '../../src/core/auth/accounts.ts';
import { listLineageEvents } from '../../src/areas/lineage/service.ts';
import { assertRunEvent } from '../helpers/openlineage.ts';

test('events stored whole before migration 0038 read back the same once stored as steps and bodies', async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-lineage-migration-'));
  const store = openStore({ dataDir, databaseUrl: undefined });
  t.after(async () => {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  // 0046 (run events) and 0049 (a trigger on the steps) build on 0038's table: they run after it, and the moved
  // events read the same after all.
  const {
    '0038_lineage_compact': _compact,
    '0046_lineage_runs': _runs,
    '0049_lineage_days_late_steps': _late,
    ...before
  } = migrationsFor('sqlite');
  const first = await new Migrator({ db: store.db, provider: { getMigrations: async () => before } }).migrateToLatest();
  assert.equal(first.error, undefined);
  const { accountId } = await createAccount(store.db, 'migrated');
  const projectId = randomUUID();
  await store.db
    .insertInto('projects')
    .values({ id: projectId, accountId, name: 'p', description: null, createdBy: 'test', createdAt: new Date().toISOString() })
    .execute();
  // Stored with the facet schema URLs of the time; served with each facet's published schema (and dpc_step the producer's).
  let served = false;
  const SERVED: Record<string, string> = {
    DpcStepRunFacet: 'https://platform-api.dev/spec/facets/1-0-0/DpcStepRunFacet.json#/$defs/DpcStepRunFacet',
    JobTypeJobFacet: 'https://openlineage.io/spec/facets/2-0-3/JobTypeJobFacet.json#/$defs/JobTypeJobFacet',
    SQLJobFacet: 'https://openlineage.io/spec/facets/1-0-1/SQLJobFacet.json#/$defs/SQLJobFacet',
    SchemaDatasetFacet: 'https://openlineage.io/spec/facets/1-0-0/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet',
    ColumnLineageDatasetFacet:
      'https://openlineage.io/spec/facets/1-0-1/ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet',
  };
  const facet = (name: string) => ({
    _producer: 'https://platform-api.dev/agent',
    _schemaURL: served ? SERVED[name] : `https://openlineage.io/spec/facets/1-0-0/${name}.json`,
  });
  const orders = { namespace: 'postgres://db:5432', name: 'shop.public.orders' };
  const event = (runId: string, status: string, sql?: string) => ({
    eventType: status === 'SUCCESS' ? 'COMPLETE' : 'FAIL',
    eventTime: '2026-11-25T10:00:03.000Z',
    producer: 'https://platform-api.dev/agent',
    schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
    run: { runId, facets: { dpc_step: { ...facet('DpcStepRunFacet'), index: 2, name: 'Build', status } } },
    job: {
      namespace: `dpc://${accountId}.${projectId}`,
      name: 'marts/orders.orch.yaml',
      facets: {
        jobType: { ...facet('JobTypeJobFacet'), processingType: 'BATCH', integration: 'DPC', jobType: 'PIPELINE' },
        ...(sql && { sql: { ...facet('SQLJobFacet'), query: sql } }),
      },
    },
    inputs: [
      { ...orders, facets: { schema: { ...facet('SchemaDatasetFacet'), fields: [{ name: 'amount', type: 'numeric' }] } } },
    ],
    outputs: [
      {
        namespace: 'postgres://db:5432',
        name: 'shop.marts.daily',
        facets: {
          columnLineage: {
            ...facet('ColumnLineageDatasetFacet'),
            fields: { total: { inputFields: [{ ...orders, field: 'amount' }] } },
          },
        },
      },
    ],
  });
  const runIds = [randomUUID(), randomUUID()];
  const old = [event(runIds[0], 'SUCCESS', 'insert into shop.marts.daily select ...'), event(runIds[1], 'FAILED')];
  served = true;
  const asServed = [event(runIds[0], 'SUCCESS', 'insert into shop.marts.daily select ...'), event(runIds[1], 'FAILED')];
  const db = store.db as unknown as Kysely<any>;
  for (const [i, stored] of old.entries()) {
    await db
      .insertInto('lineageEvents')
      .values({
        accountId,
        projectId,
        executionId: stored.run.runId,
        generatedAt: `2026-11-25T10:00:0${i + 4}.000Z`,
        event: JSON.stringify(stored),
      })
      .execute();
  }
  assert.deepEqual(await migrate(store), ['0038_lineage_compact', '0046_lineage_runs', '0049_lineage_days_late_steps']);
  const page = await listLineageEvents(store.db, accountId, {
    generatedFrom: '2026-11-25',
    generatedBefore: '2026-11-26',
    page: 0,
    size: 25,
  });
  assert.equal(page.total, 2);
  assert.deepEqual(
    page.results.map((result) => result.event),
    asServed,
  );
  for (const result of page.results) assertRunEvent(result.event);
});
