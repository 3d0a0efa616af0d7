import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/core/config.ts';
import { migrate, openStore, type Store } from '../src/core/db/database.ts';
import { createAccount } from '../src/core/auth/accounts.ts';
import { applyAgentReport } from '../src/areas/executions/lifecycle.ts';
import { createDatabase, median, record, startBenchServer } from './lib.ts';

/**
 * Issue 34's targets, on SQLite and PostgreSQL. (a) Lineage written for runs of a 20-step pipeline slows a
 * run's state changes (the agent's progress reports as the server applies them: the run read and moved,
 * the step recorded, its event emitted) by at most 10 %: the same reports with and without `step.lineage`,
 * in a store already holding RUNS × STEPS events. (b) A 31-day `GET /v1/lineage/events` at RUNS × STEPS
 * events (200,000) answers a page of 100 in at most 100 ms, first, middle and last page, through the real
 * server.
 */
const RUNS = Number(process.env.BENCH_LINEAGE_RUNS ?? 10_000);
const STEPS = 20;
const DAY_MS = 86_400_000;

/** A step's lineage as the reference agent reports a transformation output (columns and their inputs). */
function stepLineage(step: number) {
  const columns = ['order_id', 'customer_id', 'ordered_at', 'amount', 'status'];
  const input = { namespace: 'postgres://db.internal:5432', name: `shop.public.orders_${step}` };
  return {
    inputs: [{ ...input, fields: columns.map((name) => ({ name, type: 'text' })) }],
    outputs: [
      {
        namespace: 'postgres://db.internal:5432',
        name: `shop.marts.daily_${step}`,
        fields: columns.map((name) => ({ name, type: 'text' })),
        columnLineage: Object.fromEntries(columns.map((name) => [name, [{ ...input, field: name }]])),
      },
    ],
    sql: `insert into shop.marts.daily_${step} select order_id, customer_id, ordered_at, amount, status from shop.public.orders_${step}`,
  };
}

/** An OpenLineage event in the shape the server stores (recordStepLineage), for seeding. */
function storedEvent(accountId: string, projectId: string, runId: string, step: number): string {
  const lineage = stepLineage(step);
  return JSON.stringify({
    eventType: 'COMPLETE',
    eventTime: new Date().toISOString(),
    producer: 'https://platform-api.dev/agent',
    schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
    run: { runId, facets: { dpc_step: { index: step, name: `step ${step}`, status: 'SUCCESS' } } },
    job: {
      namespace: `dpc://${accountId}.${projectId}`,
      name: 'marts/orders.orch.yaml',
      facets: { sql: { query: lineage.sql } },
    },
    inputs: lineage.inputs,
    outputs: lineage.outputs.map(({ columnLineage, ...dataset }) => ({
      ...dataset,
      facets: {
        columnLineage: { fields: Object.fromEntries(Object.entries(columnLineage).map(([c, f]) => [c, { inputFields: f }])) },
      },
    })),
  });
}

/** RUNS × STEPS events of `projectId`, spread over the last 30 days, inserted straight into the store. */
async function seedEvents(store: Store, accountId: string, projectId: string): Promise<void> {
  const started = performance.now();
  const total = RUNS * STEPS;
  const span = 30 * DAY_MS;
  const end = Date.now() - 60_000;
  const batch = 250;
  for (let i = 0; i < total; i += batch) {
    const rows = Array.from({ length: Math.min(batch, total - i) }, (_, j) => {
      const n = i + j;
      const runId = `00000000-0000-4000-8000-${String(Math.floor(n / STEPS)).padStart(12, '0')}`;
      return {
        accountId,
        projectId,
        executionId: runId,
        generatedAt: new Date(end - span + Math.floor((n * span) / total)).toISOString(),
        event: storedEvent(accountId, projectId, runId, n % STEPS),
      };
    });
    await store.db.insertInto('lineageEvents').values(rows).execute();
  }
  // What autovacuum does after so many inserts (on its own within a minute or so): the visibility map that
  // lets PostgreSQL count and skip through the index alone, and the planner's statistics.
  await sql`${sql.raw(store.dialect === 'postgres' ? 'vacuum analyze lineage_events' : 'analyze lineage_events')}`.execute(
    store.db,
  );
  console.log(`  ${total} lineage events seeded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

async function seedProject(store: Store, accountId: string): Promise<{ projectId: string; environmentId: string }> {
  const projectId = randomUUID();
  const environmentId = randomUUID();
  const at = new Date().toISOString();
  await store.db
    .insertInto('projects')
    .values({ id: projectId, accountId, name: `bench ${projectId}`, description: null, createdBy: 'bench', createdAt: at })
    .execute();
  await store.db
    .insertInto('environments' as never)
    .values({ id: environmentId, projectId, name: 'bench', createdAt: at } as never)
    .execute();
  return { projectId, environmentId };
}

/** `count` RUNNING runs, each held by an agent work (its id the run's `agentWorkId`); answers the work ids. */
async function seedRuns(store: Store, accountId: string, projectId: string, environmentId: string, count: number) {
  const at = new Date().toISOString();
  const works = Array.from({ length: count }, () => randomUUID());
  await store.db
    .insertInto('executions')
    .values(
      works.map((workId) => ({
        id: randomUUID(),
        accountId,
        projectId,
        environmentId,
        environmentName: 'bench',
        kind: 'PIPELINE',
        pipelineName: 'marts/orders.orch.yaml',
        testScope: null,
        testName: null,
        versionName: 'v1',
        agentId: 'a',
        agentWorkId: workId,
        executionTag: null,
        runningTag: null,
        trigger: 'API',
        scheduleId: null,
        scheduledFor: null,
        status: 'RUNNING',
        message: null,
        variables: '{}',
        startedAt: at,
        finishedAt: null,
        lastReportAt: null,
      })),
    )
    .execute();
  return works;
}

/**
 * µs per progress report applied (each in its own transaction, as the agent protocol records it): every
 * run's 20 steps, each reported RUNNING and then SUCCESS (with its lineage when `withLineage`); 8 runs at a
 * time, as reports of several agents arrive.
 */
async function reports(store: Store, accountId: string, works: string[], withLineage: boolean): Promise<number> {
  const apply = (workId: string, body: unknown) =>
    store.db.transaction().execute((trx) =>
      applyAgentReport(trx, {
        work: { id: workId, accountId } as never,
        report: { type: 'progress', body },
      }),
    );
  const started = performance.now();
  for (let i = 0; i < works.length; i += 8) {
    await Promise.all(
      works.slice(i, i + 8).map(async (workId) => {
        for (let index = 0; index < STEPS; index += 1) {
          const step = { index, name: `step ${index}`, startedAt: new Date().toISOString() };
          await apply(workId, { step: { ...step, status: 'RUNNING' } });
          await apply(workId, {
            step: {
              ...step,
              status: 'SUCCESS',
              finishedAt: new Date().toISOString(),
              ...(withLineage && { lineage: stepLineage(index) }),
            },
          });
        }
      }),
    );
  }
  return ((performance.now() - started) * 1000) / (works.length * STEPS * 2);
}

async function writeOverhead(kind: 'sqlite' | 'postgres'): Promise<void> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-lineage-'));
  const database = kind === 'postgres' ? await createDatabase() : undefined;
  const store = openStore({ ...loadConfig({}), dataDir, databaseUrl: database?.url, rememberReads: false });
  try {
    await migrate(store);
    const { accountId } = await createAccount(store.db, 'bench');
    const { projectId, environmentId } = await seedProject(store, accountId);
    await seedEvents(store, accountId, projectId);
    const rounds = Number(process.env.BENCH_ROUNDS ?? 6);
    const per = kind === 'sqlite' ? 120 : 40;
    // A warm-up round, not counted: the seeding's WAL checkpoint (SQLite) and cold caches fall on it.
    await reports(store, accountId, await seedRuns(store, accountId, projectId, environmentId, per), true);
    const without: number[] = [];
    const withLineage: number[] = [];
    // Alternating, each going first in every other round, so that the machine's drift falls on both alike.
    for (let round = 0; round < rounds; round += 1) {
      const runs = [
        await seedRuns(store, accountId, projectId, environmentId, per),
        await seedRuns(store, accountId, projectId, environmentId, per),
      ];
      for (const lineage of round % 2 ? [true, false] : [false, true]) {
        const us = await reports(store, accountId, runs[Number(lineage)], lineage);
        (lineage ? withLineage : without).push(us);
      }
      console.log(
        `  round ${round + 1}: a report ${without.at(-1)!.toFixed(0)} µs, with lineage ${withLineage.at(-1)!.toFixed(0)} µs`,
      );
    }
    const a = median(without);
    const b = median(withLineage);
    const added = ((b - a) / a) * 100;
    console.log(
      `${kind}: a progress report takes ${a.toFixed(0)} µs, with its step's lineage ${b.toFixed(0)} µs (+${added.toFixed(1)} %), at ${RUNS * STEPS} events`,
    );
    record({ name: `lineage written with a run's progress reports, ${kind}: added (%)`, measured: added, atMost: 10 });
  } finally {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
    await database?.drop();
  }
}

async function paging(kind: 'sqlite' | 'postgres'): Promise<void> {
  const server = await startBenchServer({ postgres: kind === 'postgres', env: { DPC_REMEMBER_READS: 'false' } });
  const store = openStore({ ...loadConfig({}), dataDir: server.dataDir, databaseUrl: server.databaseUrl, rememberReads: false });
  try {
    const { id: accountId } = await store.db.selectFrom('accounts').select('id').executeTakeFirstOrThrow();
    const { projectId } = await server.api('POST', '/projects', { name: 'lineage bench' });
    await seedEvents(store, accountId, projectId);
    const before = new Date().toISOString().slice(0, 19);
    const from = new Date(Date.now() - 31 * DAY_MS).toISOString().slice(0, 19);
    const total = RUNS * STEPS;
    const lastPage = Math.ceil(total / 100) - 1;
    const pages = { first: 0, middle: Math.floor(lastPage / 2), last: lastPage };
    for (const [name, page] of Object.entries(pages)) {
      const times: number[] = [];
      for (let i = 0; i < 7; i += 1) {
        const started = performance.now();
        const answer = await server.api(
          'GET',
          `/lineage/events?generatedFrom=${from}&generatedBefore=${before}&page=${page}&size=100`,
        );
        times.push(performance.now() - started);
        if (answer.total !== total || answer.results.length !== 100) {
          throw new Error(`page ${page}: ${answer.results.length} results of ${answer.total}, expected 100 of ${total}`);
        }
      }
      const ms = median(times);
      console.log(`${kind}: page ${page} (${name}) of 100 of ${total} events, 31-day window: ${ms.toFixed(1)} ms (median of 7)`);
      record({ name: `31-day lineage page of 100 at ${total} events, ${name} page, ${kind} (ms)`, measured: ms, atMost: 100 });
    }
  } finally {
    await store.close();
    await server.stop();
  }
}

export async function bench(): Promise<void> {
  await paging('sqlite');
  await paging('postgres');
  await writeOverhead('sqlite');
  await writeOverhead('postgres');
}
