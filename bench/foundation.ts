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
 * Two server processes on one PostgreSQL database against one, on the environments list: the load
 * of one process (50 connections) against the sum of two loads run at once (25 connections each),
 * in turn for ROUNDS rounds (the median round decides). Where there are at least 3 CPUs, each server
 * is pinned to a CPU of its own and this process (the load generator) to the others. On fewer, the
 * generator shares the servers' CPUs and its cost per request bounds the ratio, so the load is
 * pipelined (pipelinedLoad: about 10 µs of CPU a request here, autocannon 16-40 µs) and each round
 * prints what the CPUs allow at most: every CPU busy with servers and the load generator
 * (PostgreSQL's share left out), against what one process served.
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
      const ratios = [];
      const ceilings = [];
      for (let round = 1; round <= ROUNDS; round += 1) {
        const [serverBefore, generatorBefore] = [first.cpuMicros(), process.cpuUsage()];
        const one = await generate(first, 50);
        const requests = one.requestsPerSecond * DURATION_SECONDS;
        const serverPerRequest = (first.cpuMicros() - serverBefore) / requests;
        const generatorUsage = process.cpuUsage(generatorBefore);
        const generatorPerRequest = (generatorUsage.user + generatorUsage.system) / requests;
        ceilings.push((availableParallelism() * 1e6) / (serverPerRequest + generatorPerRequest) / one.requestsPerSecond);
        const both = await Promise.all(servers.map((server) => generate(server, 25)));
        const sum = both[0].requestsPerSecond + both[1].requestsPerSecond;
        const errors = one.errors + both[0].errors + both[1].errors;
        ratios.push(sum / one.requestsPerSecond);
        console.log(
          `  round ${round}: two processes ${sum.toFixed(0)} req/s (${both.map((r) => r.requestsPerSecond.toFixed(0)).join(' + ')})` +
            ` | one process ${one.requestsPerSecond.toFixed(0)} req/s | ${ratios.at(-1)!.toFixed(2)}x` +
            ` | CPU a request: server ${serverPerRequest.toFixed(0)} µs, load generator ${generatorPerRequest.toFixed(0)} µs` +
            ` (${availableParallelism()} CPUs allow at most ${ceilings.at(-1)!.toFixed(2)}x)` +
            (errors ? ` | ${errors} errors` : ''),
        );
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
        name: '2 server processes: the most this machine allows (CPUs over server and load generator CPU a request)',
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
