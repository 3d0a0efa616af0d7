import { fork } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { abba, createDatabase, median, record, signed, spread, startBenchServer, type BenchServer } from './lib.ts';
import { protocolAgent, type ProtocolAgent } from './support/protocol-runs.ts';

/**
 * Issue 33's targets. (1) One server process holds SUBSCRIBERS idle event streams in at most 300 MB of
 * resident memory and delivers one event to all of them with p99 at most 1 s (from the write's request to
 * each subscriber reading the event). (2) An outbox write adds at most 10 % to a run-state change (an
 * agent's report applied to its run, as the server does it), on SQLite and PostgreSQL.
 */
const WORKER = fileURLToPath(new URL('./support/report-worker.ts', import.meta.url));
const WITHOUT_OUTBOX = fileURLToPath(new URL('./support/without-outbox.mjs', import.meta.url));
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
  // One API client opens them all: lift its cap on open streams (DPC_EVENTS_STREAMS_PER_CLIENT).
  const server = await startBenchServer({ env: { DPC_EVENTS_STREAMS_PER_CLIENT: String(SUBSCRIBERS) } });
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

/** A report-applying process (support/report-worker.ts) on its own store, with or without the outbox. */
interface ReportWorker extends Reporting {
  stop(): Promise<void>;
}

async function startReportWorker(kind: 'sqlite' | 'postgres', withoutOutbox: boolean): Promise<ReportWorker> {
  const database = kind === 'postgres' ? await createDatabase() : undefined;
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-outbox-'));
  const child = fork(WORKER, [], {
    execArgv: ['--import', 'tsx', ...(withoutOutbox ? ['--import', WITHOUT_OUTBOX] : [])],
    env: { ...process.env, BENCH_DATA_DIR: dataDir, ...(database && { BENCH_DATABASE_URL: database.url }) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const next = () =>
    new Promise<any>((resolve, reject) => {
      const exited = (code: number | null) => reject(new Error(`report worker exited (${code})`));
      child.once('exit', exited);
      child.once('message', (message) => {
        child.off('exit', exited);
        resolve(message);
      });
    });
  await next(); // ready: migrated and seeded
  return {
    report(steps) {
      const answer = next();
      child.send({ steps });
      return answer;
    },
    async stop() {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ stop: true });
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
      await database?.drop();
    },
  };
}

/** Reports applied somewhere, with or without the outbox: a process of support/report-worker.ts, or a server. */
interface Reporting {
  /** A set of runs reported through (`steps` steps each); wall and CPU µs per report. */
  report(steps: number): Promise<{ micros: number; cpuMicros: number }>;
}

/**
 * BENCH_OUTBOX_ROUNDS (default 60) A-B-B-A quadruples of `without` and `withEvents`, each side a set of runs of 4
 * steps, after a warm-up not counted (statements prepared, caches and the JIT warm): wall and CPU time per report.
 */
async function compareReports(without: Reporting, withEvents: Reporting) {
  const steps = 4;
  for (let i = 0; i < 4; i += 1) {
    await without.report(steps);
    await withEvents.report(steps);
  }
  return abba(Number(process.env.BENCH_OUTBOX_ROUNDS ?? 60), async (position) => {
    const { micros, cpuMicros } = await (position === 1 || position === 2 ? withEvents : without).report(steps);
    return { wall: micros, cpu: cpuMicros };
  });
}

/**
 * (2) The outbox's cost on run-state changes as the server makes them: agents' reports applied to runs
 * (applyAgentReport: the run read and moved, the step recorded, and the event of each), the same reports in
 * two processes alike but for the outbox (one runs with emit() doing nothing, support/without-outbox.mjs).
 * ROUNDS quadruples A B B A (A without, B with; each a set of 8 runs of STEPS steps, a few ms), each giving
 * (B1 + B2) / (A1 + A2) − 1: a drift within a quadruple cancels out, and the median passes over the
 * quadruples a burst of load fell on. Also the processes' CPU time per report, which the machine's load moves
 * far less than wall time.
 */
async function outboxOverhead(kind: 'sqlite' | 'postgres'): Promise<void> {
  const [without, withEvents] = await Promise.all([startReportWorker(kind, true), startReportWorker(kind, false)]);
  try {
    const { wall, cpu } = await compareReports(without, withEvents);
    const added = spread(wall.added);
    console.log(
      `${kind}: an agent's report applied to its run takes ${median(wall.a).toFixed(0)} µs, with its outbox event ${median(wall.b).toFixed(0)} µs; added ${added.text}`,
    );
    console.log(
      `${kind}: the applying process's CPU time per report: ${signed(median(cpu.added))} %` +
        (kind === 'postgres' ? ' (the store works in its own processes: not the whole cost)' : ''),
    );
    record({ name: `outbox write added to a run-state change, ${kind} (%)`, measured: added.median, atMost: 10 });
  } finally {
    await Promise.all([without.stop(), withEvents.stop()]);
  }
}

/** A server taking agents' reports over the agent protocol, with or without the outbox (support/protocol-runs.ts). */
interface ReportingServer extends Reporting {
  stop(): Promise<void>;
}

/** Runs reported at once, as several agents' reports arrive. */
const RUNS_AT_ONCE = 8;

async function startReportingServer(kind: 'sqlite' | 'postgres', withoutOutbox: boolean): Promise<ReportingServer> {
  const server: BenchServer = await startBenchServer({
    postgres: kind === 'postgres',
    env: { DPC_HOSTED_AGENT: 'false' },
    nodeFlags: withoutOutbox ? ['--import', 'tsx', '--import', WITHOUT_OUTBOX] : [],
  });
  const agent: ProtocolAgent = await protocolAgent(server);
  return {
    async report(steps) {
      const runs = await agent.startRuns(RUNS_AT_ONCE);
      const cpu = server.cpuMicros();
      const started = performance.now();
      await Promise.all(
        runs.map(async (run) => {
          for (let index = 0; index < steps; index += 1) {
            const step = { index, name: `step ${index}`, startedAt: new Date().toISOString() };
            await agent.report(run, 'progress', { step: { ...step, status: 'RUNNING' } });
            await agent.report(run, 'progress', {
              step: { ...step, status: 'SUCCESS', finishedAt: new Date().toISOString() },
            });
          }
          await agent.report(run, 'done', {});
        }),
      );
      const reports = runs.length * (2 * steps + 1);
      return {
        micros: ((performance.now() - started) * 1000) / reports,
        cpuMicros: (server.cpuMicros() - cpu) / reports,
      };
    },
    async stop() {
      agent.stop();
      await server.stop();
    },
  };
}

/**
 * (3) The outbox's cost on a run-state change as an agent makes it: its report sent over the agent protocol to
 * a real server (`POST /dpc/agent/v1/work/{workId}/reports`: the request, the agent's token, the report's
 * checks, taken once by its sequence, applied to the run), two servers alike but for the outbox (one with
 * emit() doing nothing), RUNS_AT_ONCE runs at a time, A-B-B-A quadruples as above. Measured by the servers'
 * CPU time per report (from /proc; the wall time of a set is printed too): each server is its own process,
 * while wall time on this 2-core machine is shared with the load and with the other server.
 */
async function reportsOverTheProtocol(kind: 'sqlite' | 'postgres'): Promise<void> {
  const [without, withEvents] = await Promise.all([startReportingServer(kind, true), startReportingServer(kind, false)]);
  try {
    const { wall, cpu } = await compareReports(without, withEvents);
    const added = spread(cpu.added);
    console.log(
      `${kind}: an agent's report over the protocol costs the server ${median(cpu.a).toFixed(0)} µs of CPU, with its outbox event ` +
        `${median(cpu.b).toFixed(0)} µs; added ${added.text}; wall time per report ${signed(median(wall.added))} %` +
        (kind === 'postgres' ? ' (the store works in its own processes: not in the CPU time)' : ''),
    );
    record({
      name: `outbox write added to an agent's report over the protocol, ${kind} (%)`,
      measured: added.median,
      atMost: 10,
    });
  } finally {
    await Promise.all([without.stop(), withEvents.stop()]);
  }
}

export async function bench(): Promise<void> {
  if (SUBSCRIBERS > 0) await streams();
  // BENCH_OUTBOX_STORES=sqlite or postgres for one store; none to skip.
  const stores = (process.env.BENCH_OUTBOX_STORES ?? 'sqlite,postgres').split(',').filter(Boolean);
  if (stores.includes('sqlite')) {
    await outboxOverhead('sqlite');
    await reportsOverTheProtocol('sqlite');
  }
  if (stores.includes('postgres')) {
    await outboxOverhead('postgres');
    await reportsOverTheProtocol('postgres');
  }
}
