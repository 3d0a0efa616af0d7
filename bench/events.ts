import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/core/config.ts';
import { migrate, openStore, type Store } from '../src/core/db/database.ts';
import { createAccount } from '../src/core/auth/accounts.ts';
import { emit } from '../src/core/outbox.ts';
import { BENCH_POSTGRES_URL, median, record, startBenchServer } from './lib.ts';
import pg from 'pg';
import { randomUUID } from 'node:crypto';

/**
 * Issue 33's targets. (1) One server process holds SUBSCRIBERS idle event streams in at most 300 MB of
 * resident memory and delivers one event to all of them with p99 at most 1 s (from the write's request to
 * each subscriber reading the event). (2) An outbox write adds at most 10 % to a run-state change (a
 * transaction that reads the run and moves its status), on SQLite and PostgreSQL.
 */
const SUBSCRIBERS = Number(process.env.BENCH_SUBSCRIBERS ?? 10_000);

/** Opens one event stream; resolves once subscribed; `onEvent` gets the time each `id:` line arrives. */
function subscribe(url: string, token: string, onEvent: (at: number) => void): Promise<http.ClientRequest> {
  return new Promise((resolve, reject) => {
    const request = http.get(
      `${url}/dpc/v1/events/stream?type=projects.created`,
      { headers: { authorization: `Bearer ${token}` }, agent: false },
      (response) => {
        if (response.statusCode !== 200) return reject(new Error(`stream answered ${response.statusCode}`));
        response.setEncoding('utf8');
        let subscribed = false;
        response.on('data', (chunk: string) => {
          if (!subscribed) {
            subscribed = true;
            resolve(request);
          }
          if (chunk.includes('\nid: ') || chunk.startsWith('id: ')) onEvent(performance.now());
        });
      },
    );
    request.on('error', reject);
  });
}

async function streams(): Promise<void> {
  const server = await startBenchServer();
  const requests: http.ClientRequest[] = [];
  try {
    const base = server.memory().rssMb;
    const arrivals: number[] = [];
    const started = performance.now();
    // Opened 200 at a time.
    for (let i = 0; i < SUBSCRIBERS; i += 200) {
      const batch = Array.from({ length: Math.min(200, SUBSCRIBERS - i) }, () =>
        subscribe(server.url, server.token, (at) => arrivals.push(at)),
      );
      requests.push(...(await Promise.all(batch)));
    }
    console.log(`${SUBSCRIBERS} streams open in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const idle = server.memory().rssMb;
    console.log(`server RSS: ${base.toFixed(0)} MB before, ${idle.toFixed(0)} MB with ${SUBSCRIBERS} idle streams`);
    record({ name: `RSS of one process holding ${SUBSCRIBERS} idle event streams (MB)`, measured: idle, atMost: 300 });

    const latencies: number[] = [];
    for (let round = 0; round < 3; round += 1) {
      arrivals.length = 0;
      // From the write's request: its event is committed with the write, so it may reach streams before its answer.
      const sent = performance.now();
      await server.api('POST', '/projects', { name: `bench ${round}` });
      const deadline = performance.now() + 10_000;
      while (arrivals.length < SUBSCRIBERS && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      if (arrivals.length < SUBSCRIBERS) throw new Error(`only ${arrivals.length} of ${SUBSCRIBERS} streams got the event`);
      const sorted = arrivals.map((at) => at - sent).sort((a, b) => a - b);
      const p99 = sorted[Math.floor(sorted.length * 0.99) - 1];
      console.log(
        `round ${round + 1}: every stream got the event; p50 ${sorted[sorted.length >> 1].toFixed(0)} ms, p99 ${p99.toFixed(0)} ms, last ${sorted.at(-1)!.toFixed(0)} ms`,
      );
      latencies.push(p99);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    record({
      name: `p99 from a write's request to its event on each of ${SUBSCRIBERS} streams (ms)`,
      measured: median(latencies),
      atMost: 1000,
    });
    record({ name: `peak RSS during delivery to ${SUBSCRIBERS} streams (MB)`, measured: server.memory().peakRssMb, atMost: 300 });
  } finally {
    for (const request of requests) request.destroy();
    await server.stop();
  }
}

/** A run row in the shape a run-state change reads and moves (the executions table needs its project and environment). */
async function seedRuns(store: Store, accountId: string, count: number): Promise<string[]> {
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
  const ids = Array.from({ length: count }, () => randomUUID());
  for (let i = 0; i < ids.length; i += 200) {
    await store.db
      .insertInto('executions')
      .values(
        ids.slice(i, i + 200).map((id) => ({
          id,
          accountId,
          projectId,
          environmentId,
          environmentName: 'bench',
          kind: 'PIPELINE',
          pipelineName: 'p.orch.yaml',
          testScope: null,
          testName: null,
          versionName: 'v1',
          agentId: 'a',
          agentWorkId: null,
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
  }
  return ids;
}

/** Time per run-state change (read the run, move its status), with and without its outbox event. */
async function stateChanges(store: Store, accountId: string, ids: string[], withEvent: boolean): Promise<number> {
  const started = performance.now();
  // 8 at a time, as reports of several agents arrive.
  for (let i = 0; i < ids.length; i += 8) {
    await Promise.all(
      ids.slice(i, i + 8).map((id) =>
        store.db.transaction().execute(async (trx) => {
          const run = await trx.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
          await trx
            .updateTable('executions')
            .set({ status: 'SUCCESS', finishedAt: new Date().toISOString(), runningTag: null })
            .where('id', '=', id)
            .where('status', '=', run.status)
            .execute();
          if (withEvent) {
            await emit(trx, {
              accountId,
              type: 'pipeline-execution.finished',
              projectId: run.projectId,
              subject: `pipeline-executions/${id}`,
              data: { executionId: id, status: 'SUCCESS', previousStatus: run.status },
            });
          }
        }),
      ),
    );
  }
  return ((performance.now() - started) * 1000) / ids.length;
}

async function outboxOverhead(kind: 'sqlite' | 'postgres'): Promise<void> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-outbox-'));
  let database: string | undefined;
  if (kind === 'postgres') {
    database = `dpc_bench_${randomUUID().replaceAll('-', '')}`;
    const admin = new pg.Client({ connectionString: BENCH_POSTGRES_URL });
    await admin.connect();
    await admin.query(`create database ${database}`);
    await admin.end();
  }
  const url = database ? Object.assign(new URL(BENCH_POSTGRES_URL), { pathname: `/${database}` }).toString() : undefined;
  const store = openStore({ ...loadConfig({}), dataDir, databaseUrl: url, rememberReads: false });
  try {
    await migrate(store);
    const { accountId } = await createAccount(store.db, 'bench');
    // Many short rounds, the two kinds interleaved (each going first in every other round, so that the machine's
    // drift and what follows seeding, a WAL checkpoint or a bigger table, fall on both alike); each round gives
    // one ratio, and the median ratio decides: a round slowed by another process moves one ratio, not the answer.
    const rounds = Number(process.env.BENCH_OUTBOX_ROUNDS ?? 21);
    const per = kind === 'sqlite' ? 600 : 240;
    // A round of each first, not counted: the statements are prepared, the tables and caches warm.
    const warm = [await seedRuns(store, accountId, per), await seedRuns(store, accountId, per)];
    await stateChanges(store, accountId, warm[0], false);
    await stateChanges(store, accountId, warm[1], true);
    const ratios: number[] = [];
    const without: number[] = [];
    const withEvent: number[] = [];
    // Also this process's CPU time per change: on SQLite the store's work is this process's (better-sqlite3
    // runs on its thread), and CPU time moves far less than wall time when other processes take the CPUs.
    const cpuRatios: number[] = [];
    for (let round = 0; round < rounds; round += 1) {
      const runs = [await seedRuns(store, accountId, per), await seedRuns(store, accountId, per)];
      const took: Record<string, number> = {};
      const cpu: Record<string, number> = {};
      for (const event of round % 2 ? [true, false] : [false, true]) {
        const before = process.cpuUsage();
        took[String(event)] = await stateChanges(store, accountId, runs[Number(event)], event);
        const used = process.cpuUsage(before);
        cpu[String(event)] = used.user + used.system;
      }
      without.push(took.false);
      withEvent.push(took.true);
      ratios.push(took.true / took.false);
      cpuRatios.push(cpu.true / cpu.false);
    }
    const sorted = [...ratios].sort((a, b) => a - b);
    const quartile = (q: number) => sorted[Math.round((sorted.length - 1) * q)];
    const added = (median(ratios) - 1) * 100;
    console.log(
      `${kind}: a run-state change takes ${median(without).toFixed(0)} µs, with its outbox event ${median(withEvent).toFixed(0)} µs; ` +
        `median of ${rounds} interleaved rounds' ratios +${added.toFixed(1)} % (quartiles ${((quartile(0.25) - 1) * 100).toFixed(1)} to ${((quartile(0.75) - 1) * 100).toFixed(1)} %)`,
    );
    console.log(
      `${kind}: this process's CPU time per change, median of the rounds' ratios: +${((median(cpuRatios) - 1) * 100).toFixed(1)} %` +
        (kind === 'postgres' ? ' (the store works in its own processes: not the whole cost)' : ''),
    );
    record({ name: `outbox write added to a run-state change, ${kind} (%)`, measured: added, atMost: 10 });
  } finally {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
    if (database) {
      const admin = new pg.Client({ connectionString: BENCH_POSTGRES_URL });
      await admin.connect();
      await admin.query(`drop database if exists ${database} with (force)`);
      await admin.end();
    }
  }
}

export async function bench(): Promise<void> {
  if (SUBSCRIBERS > 0) await streams();
  // BENCH_OUTBOX_STORES=sqlite or postgres for one store; none to skip.
  const stores = (process.env.BENCH_OUTBOX_STORES ?? 'sqlite,postgres').split(',').filter(Boolean);
  if (stores.includes('sqlite')) await outboxOverhead('sqlite');
  if (stores.includes('postgres')) await outboxOverhead('postgres');
}
