/**
 * Dispatch (issue 31): from `POST …/pipeline-executions` to the run's first step RUNNING on a connected,
 * idle agent, and how many one-step runs one agent gets through. A real server (`dpc serve`) and a real
 * reference agent (`dpc agent run`), each a process of its own, on loopback; on SQLite and on PostgreSQL
 * (a database of its own on BENCH_POSTGRES_URL).
 *
 * Latency: SAMPLES runs one after another (the agent idle, waiting in its long poll, when each starts).
 * "RUNNING" is taken twice: when the step started on the agent (the step's startedAt, the agent's clock,
 * which is this machine's) and when the server shows it (the first answer of GET …/steps that lists it,
 * asked every POLL_MS): the latter is what a user sees and carries the targets (p50 ≤ 50 ms, p99 ≤ 250 ms).
 * The baseline, in the same run: one authenticated round trip to the same server (GET …/status of a run);
 * dispatch is a handful of them (the POST's transaction, the poll's claim, the agent's step report), and
 * the ratio says how many.
 *
 * Throughput: RUNS one-step runs started as fast as POSTS_AT_ONCE clients can, through the one agent,
 * until every one has finished (target ≥ 50 runs/s). Then the store is read: every run SUCCESS with its
 * one step SUCCESS, every piece of agent work done and delivered exactly once (none lost, none run twice).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import SQLite from 'better-sqlite3';
import pg from 'pg';
import { median, record, startBenchServer, type BenchServer } from './lib.ts';

const SAMPLES = Number(process.env.BENCH_DISPATCH_SAMPLES ?? 200);
const RUNS = Number(process.env.BENCH_DISPATCH_RUNS ?? 1000);
const POSTS_AT_ONCE = 8;
const POLL_MS = 2;

const dpc = path.join(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..'), 'bin', 'dpc.js');

const ONE_STEP = `type: "orchestration"
version: "1.0"
pipeline:
  components:
    Start:
      type: "start"
`;

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((sorted.length * p) / 100) - 1)];
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `dpc agent run` with these credentials; resolves once it polls. */
async function startAgent(url: string, credentials: { clientId: string; clientSecret: string }, stateDir: string) {
  const child: ChildProcess = spawn(
    process.execPath,
    [dpc, 'agent', 'run', '--url', url, '--client-id', credentials.clientId, '--state-dir', stateDir],
    { env: { ...process.env, DPC_AGENT_CLIENT_SECRET: credentials.clientSecret }, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    // Only the start is looked for; the rest is read and dropped so the pipe never fills.
    if (output.length < 100_000) output += chunk.toString();
  });
  for (let i = 0; i < 600 && !output.includes('"agent running"'); i += 1) {
    if (child.exitCode !== null) throw new Error(`dpc agent run exited: ${output}`);
    await sleep(100);
  }
  if (!output.includes('"agent running"')) throw new Error(`dpc agent run did not start: ${output}`);
  return {
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** A project whose environment runs on a new agent, with ONE_STEP published to it. */
async function setUp(server: BenchServer) {
  const { projectId } = await server.api('POST', '/projects', { name: 'dispatch' });
  const { agentId } = await server.api('POST', '/agents', {
    name: 'dispatch',
    agentType: 'CUSTOMER_HOSTED',
    cloudProvider: 'aws',
    deployment: 'fargate',
  });
  const credentials = await server.api('POST', `/agents/${agentId}/credentials`);
  await server.api('POST', `/projects/${projectId}/environments`, { name: 'bench', defaultAgentId: agentId });
  const form = new FormData();
  form.append('one.orch.yaml', new Blob([ONE_STEP], { type: 'text/plain' }), 'file');
  const uploaded = await fetch(`${server.url}/dpc/v1/projects/${projectId}/artifacts`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.token}`, versionName: 'v1', environmentName: 'bench' },
    body: form,
  });
  if (!uploaded.ok) throw new Error(`artifact upload: ${uploaded.status} ${await uploaded.text()}`);
  return { projectId, agentId, credentials: credentials as { clientId: string; clientSecret: string } };
}

interface Steps {
  results: { name: string; result: { status: string; startedAt: string } }[];
}

async function dispatchOn(store: 'sqlite' | 'postgres'): Promise<void> {
  const server = await startBenchServer({ postgres: store === 'postgres', env: { DPC_HOSTED_AGENT: 'false' } });
  const stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-agent-'));
  let agent: Awaited<ReturnType<typeof startAgent>> | undefined;
  try {
    const { projectId, credentials } = await setUp(server);
    agent = await startAgent(server.url, credentials, stateDir);
    const runs = `/projects/${projectId}/pipeline-executions`;
    const start = async () =>
      (await server.api('POST', runs, { environmentName: 'bench', pipelineName: 'one' })).pipelineExecutionId as string;
    const status = async (id: string) => (await server.api('GET', `${runs}/${id}/status`)).status as string;
    const finished = async (id: string) => {
      for (let value = await status(id); value === 'RUNNING' || value === 'QUEUED'; value = await status(id))
        await sleep(POLL_MS);
    };

    // Warm-up: the agent's token, the server's prepared statements, JIT.
    for (let i = 0; i < 20; i += 1) await finished(await start());

    const seen: number[] = [];
    const onAgent: number[] = [];
    const roundTrips: number[] = [];
    for (let i = 0; i < SAMPLES; i += 1) {
      await sleep(20); // the agent back in its long poll, idle
      const posted = Date.now();
      const postedAt = performance.now();
      const id = await start();
      let steps: Steps;
      while ((steps = (await server.api('GET', `${runs}/${id}/steps`)) as Steps).results.length === 0) await sleep(POLL_MS);
      seen.push(performance.now() - postedAt);
      await finished(id);
      steps = (await server.api('GET', `${runs}/${id}/steps`)) as Steps;
      onAgent.push(Date.parse(steps.results[0].result.startedAt) - posted);
      const before = performance.now();
      await status(id);
      roundTrips.push(performance.now() - before);
    }
    const line = (values: number[]) =>
      `p50 ${percentile(values, 50).toFixed(1)} ms, p99 ${percentile(values, 99).toFixed(1)} ms, max ${Math.max(...values).toFixed(1)} ms`;
    console.log(`${store}: POST to the first step RUNNING as the server shows it (${SAMPLES} runs): ${line(seen)}`);
    console.log(`${store}: POST to the first step RUNNING on the agent (its startedAt): ${line(onAgent)}`);
    console.log(`${store}: baseline, one GET …/status round trip to the same server: ${line(roundTrips)}`);
    console.log(`${store}: dispatch p50 / round trip p50 = ${(median(seen) / median(roundTrips)).toFixed(1)}`);
    record({ name: `dispatch ${store}: POST to first step RUNNING, p50 ms`, measured: percentile(seen, 50), atMost: 50 });
    record({ name: `dispatch ${store}: POST to first step RUNNING, p99 ms`, measured: percentile(seen, 99), atMost: 250 });
    record({ name: `dispatch ${store}: p50 / one round trip p50`, measured: median(seen) / median(roundTrips) });

    // Throughput: RUNS at once through the one agent.
    const ids: string[] = [];
    const began = performance.now();
    await Promise.all(
      Array.from({ length: POSTS_AT_ONCE }, async () => {
        while (ids.length < RUNS) {
          ids.push('');
          const at = ids.length - 1;
          ids[at] = await start();
        }
      }),
    );
    const posted = performance.now() - began;
    // Every run is waited for (its status read until final), in order: the last one bounds the time.
    for (const id of ids) await finished(id);
    const elapsed = (performance.now() - began) / 1000;
    const perSecond = RUNS / elapsed;
    console.log(
      `${store}: ${RUNS} one-step runs through one agent in ${elapsed.toFixed(1)} s: ${perSecond.toFixed(0)} runs/s` +
        ` (all started in ${(posted / 1000).toFixed(1)} s)`,
    );
    const check = await storeCheck(server, ids);
    console.log(`${store}: ${check}`);
    record({ name: `dispatch ${store}: ${RUNS} one-step runs through one agent, runs/s`, measured: perSecond, atLeast: 50 });
    record({
      name: `dispatch ${store}: runs lost or run twice`,
      measured: check === 'every run SUCCESS once, every work delivered once' ? 0 : 1,
      atMost: 0,
    });
  } finally {
    await agent?.stop();
    await server.stop();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

/** Reads the store: each run SUCCESS with one step SUCCESS, its work done and delivered exactly once. */
async function storeCheck(server: BenchServer, ids: string[]): Promise<string> {
  const query = `select e.id, e.status, w.state, w.deliveries,
      (select count(*) from execution_steps s where s.execution_id = e.id) as steps,
      (select count(*) from execution_steps s where s.execution_id = e.id and s.status = 'SUCCESS') as succeeded
    from executions e join agent_work w on w.id = e.agent_work_id`;
  let rows: { id: string; status: string; state: string; deliveries: number; steps: number; succeeded: number }[];
  if (server.databaseUrl) {
    const client = new pg.Client({ connectionString: server.databaseUrl });
    await client.connect();
    rows = (await client.query(query)).rows.map((row) => ({
      ...row,
      deliveries: Number(row.deliveries),
      steps: Number(row.steps),
      succeeded: Number(row.succeeded),
    }));
    await client.end();
  } else {
    const file = new SQLite(path.join(server.dataDir, 'platform.db'), { readonly: true });
    rows = file.prepare(query).all() as typeof rows;
    file.close();
  }
  const byId = new Map(rows.map((row) => [row.id, row]));
  const missing = ids.filter((id) => !byId.has(id));
  const bad = ids
    .map((id) => byId.get(id))
    .filter(
      (row) =>
        row &&
        (row.status !== 'SUCCESS' || row.state !== 'done' || row.deliveries !== 1 || row.steps !== 1 || row.succeeded !== 1),
    );
  if (missing.length === 0 && bad.length === 0) return 'every run SUCCESS once, every work delivered once';
  return `${missing.length} runs missing, ${bad.length} not SUCCESS once: ${JSON.stringify(bad.slice(0, 3))}`;
}

export async function bench(): Promise<void> {
  // BENCH_DISPATCH_STORES=postgres (or sqlite) measures one store only.
  const stores = (process.env.BENCH_DISPATCH_STORES ?? 'sqlite,postgres').split(',');
  if (stores.includes('sqlite')) await dispatchOn('sqlite');
  if (stores.includes('postgres')) await dispatchOn('postgres');
}
