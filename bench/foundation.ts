import { availableParallelism } from 'node:os';
import { spawnSync } from 'node:child_process';
import {
  againstBaseline,
  DURATION_SECONDS,
  median,
  pipelinedLoad,
  record,
  ROUNDS,
  startBenchServer,
  TASKSET,
  type BenchProcess,
  type BenchServer,
} from './lib.ts';

/** A project with 30 environments; answers the path of its environments list (a page of 25). */
async function projectWithEnvironments(server: BenchServer): Promise<string> {
  const { projectId } = await server.api('POST', '/projects', { name: 'bench' });
  for (let i = 0; i < 30; i += 1)
    await server.api('POST', `/projects/${projectId}/environments`, { name: `env-${String(i).padStart(2, '0')}` });
  return `/projects/${projectId}/environments`;
}

/** The authenticated 25-item lists (environments, projects) on SQLite and PostgreSQL against a bare server answering the same bytes. */
async function lists(): Promise<void> {
  const sqlite = await startBenchServer();
  try {
    const environments = await projectWithEnvironments(sqlite);
    await againstBaseline(sqlite, 'GET /v1/projects/{projectId}/environments (25 items, SQLite)', environments, {
      targets: { ratio: 0.35, p99Ms: 5 },
    });
    for (let i = 0; i < 29; i += 1) await sqlite.api('POST', '/projects', { name: `project-${String(i).padStart(2, '0')}` });
    await againstBaseline(sqlite, 'GET /v1/projects (25 items, SQLite)', '/projects', { targets: { ratio: 0.35, p99Ms: 5 } });
  } finally {
    await sqlite.stop();
  }
  // Printed only: the same list on a server whose every read asks PostgreSQL (what remembering saves there).
  for (const remembering of [true, false]) {
    const postgres = await startBenchServer({ postgres: true, env: { DPC_REMEMBER_READS: String(remembering) } });
    try {
      const environments = await projectWithEnvironments(postgres);
      await againstBaseline(
        postgres,
        `GET /v1/projects/{projectId}/environments (25 items, PostgreSQL${remembering ? '' : ', every read asks the store'})`,
        environments,
        remembering ? { targets: { ratio: 0.2 } } : {},
      );
    } finally {
      await postgres.stop();
    }
  }
}

/**
 * Two server processes on one PostgreSQL database against one, on the environments list: the sum of
 * two loads run at once (25 connections each) against the mean of the loads of one process (50
 * connections) just before and after, for ROUNDS rounds (the median round decides). Where there are at
 * least 3 CPUs, each server is pinned to a CPU of its own and this process (the load generator) to the
 * others. On fewer, the generator shares the servers' CPUs and its cost per request bounds the ratio, so
 * the load is pipelined (pipelinedLoad: 7-10 µs of CPU a request here, autocannon 16-40 µs) and each
 * round prints what the CPUs allow at one process's costs: every CPU busy with servers and the load
 * generator at what a request cost them with one process (PostgreSQL's share left out).
 */
async function severalProcesses(): Promise<void> {
  const pinned = TASKSET && availableParallelism() >= 3;
  if (pinned) spawnSync('taskset', ['-pc', `2-${availableParallelism() - 1}`, String(process.pid)]);
  const first = await startBenchServer({ postgres: true, cpu: pinned ? 0 : undefined });
  try {
    const path = await projectWithEnvironments(first);
    const headers = { authorization: `Bearer ${first.token}` };
    const second = await first.another({ cpu: pinned ? 1 : undefined });
    try {
      const servers = [first, second];
      const generate = (server: BenchProcess, connections: number, seconds?: number) =>
        pipelinedLoad(`${server.url}/dpc/v1${path}`, { headers, connections, depth: 10, seconds });
      for (const server of servers) await generate(server, 50, 2); // warm-up
      // One process's load with what a request cost the server and the load generator, and from those
      // what the CPUs allow two processes at most.
      const loadOne = async () => {
        const [serverBefore, generatorBefore] = [first.cpuMicros(), process.cpuUsage()];
        const { requestsPerSecond, errors } = await generate(first, 50);
        const requests = requestsPerSecond * DURATION_SECONDS;
        const server = (first.cpuMicros() - serverBefore) / requests;
        const generatorUsage = process.cpuUsage(generatorBefore);
        const generator = (generatorUsage.user + generatorUsage.system) / requests;
        return {
          requestsPerSecond,
          errors,
          server,
          generator,
          ceiling: (availableParallelism() * 1e6) / (server + generator) / requestsPerSecond,
        };
      };
      const ratios = [];
      const ceilings = [];
      // Two processes are loaded between two loads of one, and compared with their mean: the machine's
      // speed drifts within a round too.
      let before = await loadOne();
      for (let round = 1; round <= ROUNDS; round += 1) {
        const serversBefore = first.cpuMicros() + second.cpuMicros();
        const both = await Promise.all(servers.map((server) => generate(server, 25)));
        const serversUsed = first.cpuMicros() + second.cpuMicros() - serversBefore;
        const after = await loadOne();
        const one = (before.requestsPerSecond + after.requestsPerSecond) / 2;
        const sum = both[0].requestsPerSecond + both[1].requestsPerSecond;
        const errors = before.errors + both[0].errors + both[1].errors + after.errors; // of the loads compared
        const serverOfTwo = serversUsed / (sum * DURATION_SECONDS);
        ratios.push(sum / one);
        ceilings.push(before.ceiling);
        console.log(
          `  round ${round}: two processes ${sum.toFixed(0)} req/s (${both.map((r) => r.requestsPerSecond.toFixed(0)).join(' + ')})` +
            ` | one process ${before.requestsPerSecond.toFixed(0)} before, ${after.requestsPerSecond.toFixed(0)} after | ${ratios.at(-1)!.toFixed(2)}x` +
            ` | CPU a request: server ${before.server.toFixed(0)} µs (of two: ${serverOfTwo.toFixed(0)} µs), load generator ${before.generator.toFixed(0)} µs` +
            ` (at one process's costs, ${availableParallelism()} CPUs allow at most ${before.ceiling.toFixed(2)}x)` +
            (errors ? ` | ${errors} errors` : ''),
        );
        before = after;
      }
      console.log(
        `two processes on one PostgreSQL against one: ${median(ratios).toFixed(2)}x (median of ${ROUNDS} rounds, pipelined load)` +
          ` | ${availableParallelism()} CPUs, ${pinned ? 'servers pinned apart from the load generator' : 'not pinned (fewer than 3 CPUs or no taskset)'}`,
      );
      record({
        name: '2 server processes against 1 on PostgreSQL (environments list, pipelined load)',
        measured: median(ratios),
        atLeast: 1.7,
      });
      record({
        name: "2 server processes: what the CPUs allow at one process's costs (CPUs over server and load generator CPU a request)",
        measured: median(ceilings),
      });
    } finally {
      await second.stop();
    }
  } finally {
    await first.stop();
  }
}

export async function bench(): Promise<void> {
  await lists();
  await severalProcesses();
}
