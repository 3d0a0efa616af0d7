import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/core/config.ts';
import { migrate, openStore, type Store } from '../src/core/db/database.ts';
import { createAccount } from '../src/core/auth/accounts.ts';
import { abba, createDatabase, median, record, signed, spread, startBenchServer, type Quadruples } from './lib.ts';
import { protocolAgent, type HeldRun, type ProtocolAgent } from './support/protocol-runs.ts';
import { applyReport, seedProject, seedRuns } from './support/runs.ts';

/**
 * Issue 34's targets, on SQLite and PostgreSQL. (a) Lineage written for runs of a 20-step pipeline slows a
 * run's state changes (the agent's progress reports as the server applies them: the run read and moved,
 * the step recorded, its event emitted) by at most 10 %: the same reports with and without `step.lineage`,
 * in a store already holding the events of RUNS runs (EVENTS: each run's START, its 20 steps' and its COMPLETE);
 * and whole runs (runs-*: created, 20 steps, done) with lineage on and off. (b) A 31-day `GET /v1/lineage/events`
 * at EVENTS events (220,000) answers a page of 100 in at most 100 ms, first, middle and last page, through the
 * real server.
 */
const RUNS = Number(process.env.BENCH_LINEAGE_RUNS ?? 10_000);
const STEPS = 20;
/** The events of a run: its START, a RUNNING event per step (each reads and writes datasets), its COMPLETE. */
const EVENTS_PER_RUN = STEPS + 2;
const EVENTS = RUNS * EVENTS_PER_RUN;
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

/** The body of a step's lineage as the server stores it (recordStepLineage), for seeding. */
function storedBody(step: number) {
  const body = JSON.stringify(stepLineage(step));
  return { body, hash: createHash('sha256').update(body).digest('base64url') };
}

/** RUNS runs' events of `projectId` (EVENTS: START, 20 steps, COMPLETE each), spread over the last 30 days, inserted straight into the store. */
async function seedEvents(store: Store, accountId: string, projectId: string): Promise<void> {
  const started = performance.now();
  const total = EVENTS;
  const span = 30 * DAY_MS;
  const end = Date.now() - 60_000;
  const batch = 250;
  const bodies = Array.from({ length: STEPS }, (_, step) => storedBody(step));
  const none = JSON.stringify({ inputs: [], outputs: [] });
  const noneHash = createHash('sha256').update(none).digest('base64url');
  await store.db
    .insertInto('lineageBodies')
    .values([...bodies, { body: none, hash: noneHash }].map(({ body, hash }) => ({ projectId, hash, body })))
    .execute();
  for (let i = 0; i < total; i += batch) {
    const rows = Array.from({ length: Math.min(batch, total - i) }, (_, j) => {
      const n = i + j;
      const generatedAt = new Date(end - span + Math.floor((n * span) / total)).toISOString();
      const executionId = `00000000-0000-4000-8000-${String(Math.floor(n / EVENTS_PER_RUN)).padStart(12, '0')}`;
      const at = n % EVENTS_PER_RUN; // 0 the START, 1 to STEPS the steps, STEPS + 1 the COMPLETE
      const common = {
        accountId,
        projectId,
        executionId,
        generatedAt,
        eventTime: generatedAt,
        jobName: 'marts/orders.orch.yaml',
      };
      if (at === 0 || at === STEPS + 1) {
        const phase = at === 0 ? ('START' as const) : ('END' as const);
        return {
          ...common,
          jobKind: 'RUN' as const,
          stepIndex: -1,
          stepName: '',
          stepStatus: at === 0 ? 'START' : 'COMPLETE',
          bodyHash: noneHash,
          runId: executionId,
          parent: null,
          runPhase: phase,
        };
      }
      const step = at - 1;
      return {
        ...common,
        jobKind: 'STEP' as const,
        stepIndex: step,
        stepName: `step ${step}`,
        stepStatus: 'SUCCESS',
        bodyHash: bodies[step].hash,
        runId: null,
        parent: null,
        runPhase: null,
      };
    });
    await store.db.insertInto('lineageSteps').values(rows).execute();
  }
  // What autovacuum does after so many inserts (on its own within a minute or so): the visibility map that
  // lets PostgreSQL count and skip through the index alone, and the planner's statistics.
  await sql`${sql.raw(store.dialect === 'postgres' ? 'vacuum analyze lineage_steps' : 'analyze lineage_steps')}`.execute(
    store.db,
  );
  console.log(`  ${total} lineage events seeded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

/**
 * µs per progress report applied (each in its own transaction, as the agent protocol records it): step
 * `index` of each of the 8 runs `works`, reported RUNNING and then SUCCESS (with its lineage when
 * `withLineage`), the 8 runs at once, as reports of several agents arrive.
 */
async function stepReports(store: Store, accountId: string, works: string[], index: number, withLineage: boolean) {
  const apply = (workId: string, body: unknown) => applyReport(store, accountId, workId, { type: 'progress', body });
  const started = performance.now();
  await Promise.all(
    works.map(async (workId) => {
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
    }),
  );
  return ((performance.now() - started) * 1000) / (works.length * 2);
}

/**
 * `rounds` rounds: each makes four sets of runs (`sets`), then for each of the STEPS steps one A-B-B-A quadruple
 * in which sets 0 and 3 report the step without lineage and sets 1 and 2 with it (`report`).
 */
async function quadruplesPerStep<Runs, K extends string>(
  rounds: number,
  sets: () => Promise<Runs[]>,
  report: (runs: Runs, index: number, withLineage: boolean) => Promise<Record<K, number>>,
): Promise<Record<K, Quadruples>> {
  const all = {} as Record<K, Quadruples>;
  for (let round = 0; round < rounds; round += 1) {
    const runs = await sets();
    for (let index = 0; index < STEPS; index += 1) {
      const measured = await abba(1, (position) => report(runs[position], index, position === 1 || position === 2));
      for (const key of Object.keys(measured) as K[]) {
        const into = (all[key] ??= { a: [], b: [], added: [] });
        into.a.push(...measured[key].a);
        into.b.push(...measured[key].b);
        into.added.push(...measured[key].added);
      }
    }
  }
  return all;
}

/**
 * The added cost of lineage, measured so that the machine's noise (other processes on 2 shared CPUs) falls
 * on both sides alike: ROUNDS rounds of four sets of 8 runs; for each step, the sets report it in the order
 * A B B A (A: without lineage, B: the same reports with it), a few ms each, and that step's ratio is
 * (B1 + B2) / (A1 + A2) - 1. The result is the median of the ROUNDS × 20 ratios, with its quartiles to show
 * the spread: a linear drift within a quadruple cancels out, and a burst of load or a long GC pause falls on
 * a few quadruples that the median passes over.
 */
async function writeOverhead(kind: 'sqlite' | 'postgres'): Promise<void> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-lineage-'));
  const database = kind === 'postgres' ? await createDatabase() : undefined;
  const store = openStore({ ...loadConfig({}), dataDir, databaseUrl: database?.url, rememberReads: false });
  try {
    await migrate(store);
    const { accountId } = await createAccount(store.db, 'bench');
    const { projectId, environmentId } = await seedProject(store, accountId);
    await seedEvents(store, accountId, projectId);
    const rounds = Number(process.env.BENCH_ROUNDS ?? 30);
    const per = 8;
    // Warm-up, not counted: the seeding's WAL checkpoint (SQLite), cold caches and the JIT fall on it.
    for (let i = 0; i < 4; i += 1) {
      const works = await seedRuns(store, accountId, projectId, environmentId, per);
      for (let index = 0; index < STEPS; index += 1) await stepReports(store, accountId, works, index, i % 2 === 0);
    }
    // Each round's four sets of runs report step by step, A B B A (A without lineage, B with it) for each step.
    const { time } = await quadruplesPerStep(
      rounds,
      () => Promise.all([0, 1, 2, 3].map(() => seedRuns(store, accountId, projectId, environmentId, per))),
      async (runs, index, lineage) => ({ time: await stepReports(store, accountId, runs, index, lineage) }),
    );
    const added = spread(time.added);
    console.log(
      `${kind}: a progress report takes ${median(time.a).toFixed(0)} µs, with its step's lineage ${median(time.b).toFixed(0)} µs; ` +
        `added ${added.text}, at ${EVENTS} events`,
    );
    record({ name: `lineage written with a run's progress reports, ${kind}: added (%)`, measured: added.median, atMost: 10 });
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
    const total = EVENTS;
    const lastPage = Math.ceil(total / 100) - 1;
    const pages = { first: 0, middle: Math.floor(lastPage / 2), last: lastPage };
    // The first read of a window counts its sealed days and keeps their counts (src/areas/lineage/days.ts);
    // later reads (the pages below) count only what is not sealed. The first is measured by forgetting them.
    const forget = () => store.db.deleteFrom('lineageDays').execute();
    // The baseline: counting the window's rows, as every page did before days were kept (migration 0048).
    const countTimes: number[] = [];
    for (let i = 0; i < 7; i += 1) {
      const started = performance.now();
      await store.db
        .selectFrom('lineageSteps')
        .select((eb) => eb.fn.countAll().as('n'))
        .where('accountId', '=', accountId)
        .where('generatedAt', '>=', `${from}.000Z`)
        .where('generatedAt', '<', `${before}.000Z`)
        .execute();
      countTimes.push(performance.now() - started);
    }
    const counted = median(countTimes);
    console.log(`${kind}: counting the window's ${total} rows (the baseline): ${counted.toFixed(1)} ms (median of 7)`);
    for (const [name, page, cold] of [
      ...Object.entries(pages).map(([name, page]) => [name, page, false] as const),
      ['middle', pages.middle, true] as const,
    ]) {
      const times: number[] = [];
      for (let i = 0; i < 7; i += 1) {
        if (cold) await forget();
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
      const what = cold ? `${name} page, the window's first read` : `${name} page`;
      console.log(
        `${kind}: page ${page} (${what}) of 100 of ${total} events, 31-day window: ${ms.toFixed(1)} ms (median of 7); ` +
          `${(ms / counted).toFixed(2)} × counting the window's rows`,
      );
      record({ name: `31-day lineage page of 100 at ${total} events, ${what}, ${kind} (ms)`, measured: ms, atMost: 100 });
    }
  } finally {
    await store.close();
    await server.stop();
  }
}

/**
 * Server CPU µs per report: step `index` of each of `runs` reported over the agent protocol, RUNNING then SUCCESS
 * (with its lineage when `withLineage`), the runs at once.
 */
async function protocolStepReports(
  server: { cpuMicros(): number },
  agent: ProtocolAgent,
  runs: HeldRun[],
  index: number,
  withLineage: boolean,
): Promise<number> {
  const cpu = server.cpuMicros();
  await Promise.all(
    runs.map(async (run) => {
      const step = { index, name: `step ${index}`, startedAt: new Date().toISOString() };
      await agent.report(run, 'progress', { step: { ...step, status: 'RUNNING' } });
      await agent.report(run, 'progress', {
        step: {
          ...step,
          status: 'SUCCESS',
          finishedAt: new Date().toISOString(),
          ...(withLineage && { lineage: stepLineage(index) }),
        },
      });
    }),
  );
  return (server.cpuMicros() - cpu) / (runs.length * 2);
}

/**
 * (a') Lineage's cost on a run's state changes as an agent makes them: the same progress reports sent over the
 * agent protocol to a real server (`POST /dpc/agent/v1/work/{workId}/reports`: the request, its body's checks,
 * the report taken once, applied to the run) with and without `step.lineage`, in A-B-B-A quadruples per step as
 * in (a), measured by the server's CPU per report (from /proc), its store holding RUNS × STEPS events.
 */
async function protocolOverhead(kind: 'sqlite' | 'postgres'): Promise<void> {
  const server = await startBenchServer({ postgres: kind === 'postgres', env: { DPC_HOSTED_AGENT: 'false' } });
  const store = openStore({ ...loadConfig({}), dataDir: server.dataDir, databaseUrl: server.databaseUrl, rememberReads: false });
  const agent = await protocolAgent(server);
  try {
    const { id: accountId } = await store.db.selectFrom('accounts').select('id').executeTakeFirstOrThrow();
    const { projectId } = await server.api('POST', '/projects', { name: 'lineage bench' });
    await seedEvents(store, accountId, projectId);
    const rounds = Number(process.env.BENCH_LINEAGE_PROTOCOL_ROUNDS ?? 6);
    const per = 8;
    const warm = await agent.startRuns(per);
    for (let index = 0; index < STEPS; index += 1) await protocolStepReports(server, agent, warm, index, index % 2 === 0);
    const { cpu } = await quadruplesPerStep(
      rounds,
      async () => [
        await agent.startRuns(per),
        await agent.startRuns(per),
        await agent.startRuns(per),
        await agent.startRuns(per),
      ],
      async (runs, index, lineage) => ({ cpu: await protocolStepReports(server, agent, runs, index, lineage) }),
    );
    const added = spread(cpu.added);
    console.log(
      `${kind}: a progress report over the protocol costs the server ${median(cpu.a).toFixed(0)} µs of CPU, with its step's lineage ` +
        `${median(cpu.b).toFixed(0)} µs; added ${added.text}, at ${EVENTS} events` +
        (kind === 'postgres' ? ' (the store works in its own processes: not in the CPU time)' : ''),
    );
    record({
      name: `lineage written with a run's progress reports over the protocol, ${kind}: added (%)`,
      measured: added.median,
      atMost: 10,
    });
  } finally {
    agent.stop();
    await store.close();
    await server.stop();
  }
}

/** CPU µs used so far by the PostgreSQL backends serving `store`'s database (from /proc), but the asking one's. */
async function backendsCpu(store: Store): Promise<Map<number, number>> {
  const { rows } = await sql<{
    pid: number;
  }>`select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()`.execute(store.db);
  const cpu = new Map<number, number>();
  for (const { pid } of rows) {
    try {
      cpu.set(pid, Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1000);
    } catch {
      // Ended meanwhile (an idle pool connection closes after 10 s): it did nothing since.
    }
  }
  return cpu;
}

/** A `dpc serve` process for the runs measure: lineage on or off, its store holding RUNS × STEPS events. */
interface RunsServer {
  /** A set of RUNS_AT_ONCE runs played whole; µs per run: the server's CPU, PostgreSQL's backends' CPU, wall time. */
  runs(): Promise<{ cpu: number; backends: number; wall: number }>;
  /** Lineage rows in its store. */
  lineageRows(): Promise<number>;
  stop(): Promise<void>;
}

const RUNS_AT_ONCE = 8;

async function startRunsServer(kind: 'sqlite' | 'postgres', lineage: boolean): Promise<RunsServer> {
  const server = await startBenchServer({
    postgres: kind === 'postgres',
    env: { DPC_HOSTED_AGENT: 'false', DPC_LINEAGE: String(lineage) },
  });
  const store = openStore({ ...loadConfig({}), dataDir: server.dataDir, databaseUrl: server.databaseUrl, rememberReads: false });
  const agent = await protocolAgent(server);
  const { id: accountId } = await store.db.selectFrom('accounts').select('id').executeTakeFirstOrThrow();
  const { projectId } = await server.api('POST', '/projects', { name: 'lineage bench' });
  await seedEvents(store, accountId, projectId);
  const backends = async () => (kind === 'postgres' ? backendsCpu(store) : new Map<number, number>());
  return {
    async runs() {
      const cpu = server.cpuMicros();
      const before = await backends();
      const started = performance.now();
      // Created through the API (POST pipeline-executions: the run's START) and taken over the protocol.
      const runs = await agent.startRuns(RUNS_AT_ONCE);
      await Promise.all(
        runs.map(async (run) => {
          for (let index = 0; index < STEPS; index += 1) {
            const step = { index, name: `step ${index}`, startedAt: new Date().toISOString() };
            await agent.report(run, 'progress', { step: { ...step, status: 'RUNNING' } });
            await agent.report(run, 'progress', {
              step: { ...step, status: 'SUCCESS', finishedAt: new Date().toISOString(), lineage: stepLineage(index) },
            });
          }
          // Done: the run's end (COMPLETE).
          await agent.report(run, 'done', {});
        }),
      );
      const wall = performance.now() - started;
      const used = server.cpuMicros() - cpu;
      const after = await backends();
      let backendMicros = 0;
      for (const [pid, micros] of after) backendMicros += micros - (before.get(pid) ?? 0);
      return { cpu: used / runs.length, backends: backendMicros / runs.length, wall: (wall * 1000) / runs.length };
    },
    async lineageRows() {
      const { count } = await store.db
        .selectFrom('lineageSteps')
        .select((eb) => eb.fn.countAll<string | number>().as('count'))
        .executeTakeFirstOrThrow();
      return Number(count);
    },
    async stop() {
      agent.stop();
      await store.close();
      await server.stop();
    },
  };
}

/**
 * (a'') Lineage's cost on whole runs' state changes, as the server makes them for a run of a 20-step pipeline:
 * two real `dpc serve` processes on the same kind of store, each holding RUNS × STEPS events, alike but for
 * DPC_LINEAGE (A: false, B: true, the default). A side is a set of RUNS_AT_ONCE runs, each created through the
 * API (POST pipeline-executions; with lineage its START), its work taken over the agent protocol, its 20 steps
 * reported RUNNING and then SUCCESS with `step.lineage` (the same reports to both: A does not read it), then
 * done (with lineage its COMPLETE, after reading the run's run-level rows). Measured by the server's CPU per run
 * (from /proc), in A-B-B-A quadruples (BENCH_LINEAGE_RUNS_ROUNDS, default 12); on PostgreSQL also its backends'
 * CPU (the store works in its own processes), printed.
 */
async function runsOverhead(kind: 'sqlite' | 'postgres'): Promise<void> {
  const [off, on] = await Promise.all([startRunsServer(kind, false), startRunsServer(kind, true)]);
  try {
    const seeded = EVENTS;
    // Warm-up, not counted: the seeding's WAL checkpoint (SQLite), cold caches and the JIT fall on it.
    for (let i = 0; i < 2; i += 1) {
      await off.runs();
      await on.runs();
    }
    const quadruples = Number(process.env.BENCH_LINEAGE_RUNS_ROUNDS ?? 12);
    const { cpu, backends, wall } = await abba(quadruples, (position) => (position === 1 || position === 2 ? on : off).runs());
    const runs = (quadruples * 2 + 2) * RUNS_AT_ONCE;
    const [offRows, onRows] = [await off.lineageRows(), await on.lineageRows()];
    // Off: nothing recorded. On: each run's START, its 20 steps' datasets and its COMPLETE.
    if (offRows !== seeded || onRows !== seeded + runs * (STEPS + 2)) {
      throw new Error(`lineage rows: ${offRows} without, ${onRows} with; expected ${seeded} and ${seeded + runs * (STEPS + 2)}`);
    }
    const added = spread(cpu.added);
    console.log(
      `${kind}: a whole run (created, 20 steps RUNNING and SUCCESS with step.lineage, done; ${RUNS_AT_ONCE} at once) costs the server ` +
        `${median(cpu.a).toFixed(0)} µs of CPU with DPC_LINEAGE=false, ${median(cpu.b).toFixed(0)} µs with lineage; ` +
        `ratio ${(median(cpu.b) / median(cpu.a)).toFixed(3)}; added ${added.text}, at ${seeded} events; ` +
        `wall time per run ${signed(median(wall.added))} %`,
    );
    if (kind === 'postgres') {
      // The server and its backends together: what a run costs this machine, store included.
      const whole = cpu.a.map((_, i) => ((cpu.b[i] + backends.b[i]) / (cpu.a[i] + backends.a[i]) - 1) * 100);
      console.log(
        `${kind}: PostgreSQL's backends' CPU per run ${median(backends.a).toFixed(0)} µs without, ${median(backends.b).toFixed(0)} µs with; ` +
          `added ${spread(backends.added).text}; server and backends together ${spread(whole).text}`,
      );
    }
    record({
      name: `lineage added to whole runs' state changes (20 steps), ${kind}: server CPU (%)`,
      measured: added.median,
      atMost: 10,
    });
  } finally {
    await Promise.all([off.stop(), on.stop()]);
  }
}

/**
 * BENCH_LINEAGE_PARTS (default all): paging-sqlite, paging-postgres, write-sqlite, write-postgres, protocol-sqlite,
 * protocol-postgres, runs-sqlite, runs-postgres.
 */
export async function bench(): Promise<void> {
  const parts = (
    process.env.BENCH_LINEAGE_PARTS ??
    'paging-sqlite,paging-postgres,write-sqlite,write-postgres,protocol-sqlite,protocol-postgres,runs-sqlite,runs-postgres'
  ).split(',');
  if (parts.includes('paging-sqlite')) await paging('sqlite');
  if (parts.includes('paging-postgres')) await paging('postgres');
  if (parts.includes('write-sqlite')) await writeOverhead('sqlite');
  if (parts.includes('write-postgres')) await writeOverhead('postgres');
  if (parts.includes('protocol-sqlite')) await protocolOverhead('sqlite');
  if (parts.includes('protocol-postgres')) await protocolOverhead('postgres');
  if (parts.includes('runs-sqlite')) await runsOverhead('sqlite');
  if (parts.includes('runs-postgres')) await runsOverhead('postgres');
}
