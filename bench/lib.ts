/**
 * Shared pieces of the benchmarks: the real server in a child process, a bare node:http baseline in
 * another, and an autocannon load run against either. Each benchmark compares against the baseline in
 * the same run and prints the ratio, since absolute numbers mean little on a noisy machine.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import pg from 'pg';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dpc = path.join(root, 'bin', 'dpc.js');

export const CONNECTIONS = 50;
export const DURATION_SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
/**
 * A comparison is taken in rounds, the subject and its baseline loaded in turn: this machine's speed
 * drifts by half from minute to minute, and a pair loaded seconds apart shares the drift. The median
 * round decides.
 */
export const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

/** What one A-B-B-A quadruple measured, per quantity: A's and B's mean, and B's added share (B1 + B2) / (A1 + A2) − 1 in %. */
export interface Quadruples {
  a: number[];
  b: number[];
  added: number[];
}

/**
 * `count` A-B-B-A quadruples: `sample(position)` measures one set (positions 0 and 3 are A, 1 and 2 are B), giving
 * one or more quantities by name (wall µs, CPU µs). A linear drift within a quadruple cancels out, and the median
 * of the quadruples passes over the few a burst of load or a GC pause fell on.
 */
export async function abba<K extends string>(
  count: number,
  sample: (position: 0 | 1 | 2 | 3) => Promise<Record<K, number>>,
): Promise<Record<K, Quadruples>> {
  const results = {} as Record<K, Quadruples>;
  for (let i = 0; i < count; i += 1) {
    const a1 = await sample(0);
    const b1 = await sample(1);
    const b2 = await sample(2);
    const a2 = await sample(3);
    for (const key of Object.keys(a1) as K[]) {
      const result = (results[key] ??= { a: [], b: [], added: [] });
      result.a.push((a1[key] + a2[key]) / 2);
      result.b.push((b1[key] + b2[key]) / 2);
      result.added.push(((b1[key] + b2[key]) / (a1[key] + a2[key]) - 1) * 100);
    }
  }
  return results;
}

/** A percentage with its sign: +3.1, -2.0. */
export const signed = (value: number) => `${value >= 0 ? '+' : ''}${value.toFixed(1)}`;

/** `added` (%) of quadruples as printed: the median and its quartiles. */
export function spread(added: number[]): { median: number; text: string } {
  const sorted = [...added].sort((x, y) => x - y);
  const quartile = (q: number) => sorted[Math.round((sorted.length - 1) * q)];
  const middle = median(added);
  return {
    median: middle,
    text: `${signed(middle)} % (median of ${added.length} A-B-B-A quadruples; quartiles ${quartile(0.25).toFixed(1)} to ${quartile(0.75).toFixed(1)} %)`,
  };
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

async function waitFor(url: string, child: ChildProcess): Promise<void> {
  for (let i = 0; i < 300; i += 1) {
    if (child.exitCode !== null) throw new Error(`process exited with ${child.exitCode} before answering ${url}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer`);
}

export interface BenchProcess {
  url: string;
  pid: number;
  /** Resident memory now and its peak so far, in MB (from /proc). */
  memory(): { rssMb: number; peakRssMb: number };
  /** CPU time used so far (user and system), in µs (from /proc). */
  cpuMicros(): number;
  stop(): Promise<void>;
}

function procMemory(pid: number) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return { rssMb: kb('VmRSS') / 1024, peakRssMb: kb('VmHWM') / 1024 };
}

/** Clock ticks per second of /proc/<pid>/stat's times: 100 on Linux (USER_HZ). */
const CLOCK_TICKS = 100;

/**
 * CPU time of a process so far, in µs: the time each of its threads has run, in ns, from /proc/<pid>/task/<tid>/schedstat
 * (summed over the threads alive now: its main thread, libuv's pool, V8's helpers); where the kernel keeps no
 * schedstat, utime + stime from /proc/<pid>/stat, in clock ticks (10 ms: too coarse for a set of a few ms).
 */
function procCpuMicros(pid: number): number {
  try {
    let ns = 0;
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // the thread ended meanwhile
      }
    }
    if (ns > 0) return ns / 1000;
  } catch {
    // no schedstat here
  }
  // The fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS;
}

function wrap(child: ChildProcess, url: string, cleanup: () => unknown = () => {}): BenchProcess {
  return {
    url,
    pid: child.pid!,
    memory: () => procMemory(child.pid!),
    cpuMicros: () => procCpuMicros(child.pid!),
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve(cleanup() as void);
        child.once('exit', () => resolve(cleanup() as void));
        child.kill('SIGTERM');
      }),
  };
}

/** Runs `dpc` with the bench's store; answers its JSON output. */
export function dpcJson(args: string[], env: NodeJS.ProcessEnv): Promise<any> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [dpc, ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`dpc ${args.join(' ')} exited ${code}`)),
    );
  });
}

export interface BenchServer extends BenchProcess {
  dataDir: string;
  /** The PostgreSQL database of this server, or undefined on SQLite. */
  databaseUrl?: string;
  /** A bearer token of a new account's admin client. */
  token: string;
  api(method: string, urlPath: string, body?: unknown): Promise<any>;
  /** Another server process on the same store (same data folder or database), e.g. pinned to a CPU. */
  another(options?: { cpu?: number }): Promise<BenchProcess>;
}

/** The PostgreSQL server the benchmarks on PostgreSQL use; each creates a database of its own there. */
export const BENCH_POSTGRES_URL = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export async function createDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `dpc_bench_${randomUUID().replaceAll('-', '')}`;
  const admin = new pg.Client({ connectionString: BENCH_POSTGRES_URL });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(BENCH_POSTGRES_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: BENCH_POSTGRES_URL });
      await client.connect();
      await client.query(`drop database if exists ${name} with (force)`);
      await client.end();
    },
  };
}

/** `dpc serve` in a child process with `env`, pinned to `cpu` (through taskset) when given and available. */
async function serve(env: NodeJS.ProcessEnv, cpu?: number, flags: string[] = []): Promise<{ child: ChildProcess; url: string }> {
  const port = await freePort();
  // BENCH_NODE_FLAGS passes flags to the server's node (e.g. --cpu-prof) to see where its time goes.
  const nodeFlags = [...(process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean), ...flags];
  const command = [process.execPath, ...nodeFlags, dpc, 'serve'];
  const pinned = cpu !== undefined && TASKSET ? ['taskset', '-c', String(cpu), ...command] : command;
  const child = spawn(pinned[0], pinned.slice(1), {
    env: { ...process.env, ...env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(`${url}/healthz`, child);
  return { child, url };
}

/** Whether processes can be pinned to CPUs here (taskset of util-linux). */
export const TASKSET = spawnSync('taskset', ['-V']).status === 0;

/**
 * The real server in a fresh store, with an account and a token, logging only warnings: SQLite in a
 * fresh data folder, or with `postgres` a fresh database on BENCH_POSTGRES_URL (dropped when it stops).
 */
export async function startBenchServer(
  options: { postgres?: boolean; cpu?: number; env?: NodeJS.ProcessEnv; nodeFlags?: string[] } = {},
): Promise<BenchServer> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-'));
  const database = options.postgres ? await createDatabase() : undefined;
  const env = {
    DPC_DATA_DIR: dataDir,
    DATABASE_URL: database?.url ?? '',
    LOG_LEVEL: 'warn',
    DPC_RATE_LIMIT_MAX: '0',
    ...options.env,
  };
  const account = await dpcJson(['accounts', 'create', '--name', 'bench'], env);
  const { child, url } = await serve(env, options.cpu, options.nodeFlags);
  const tokenAnswer = await fetch(`${url}/oauth/dpc/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: account.clientId,
      client_secret: account.clientSecret,
    }),
  });
  const { access_token: token } = (await tokenAnswer.json()) as { access_token: string };
  const base = wrap(child, url, async () => {
    rmSync(dataDir, { recursive: true, force: true });
    await database?.drop();
  });
  return {
    ...base,
    dataDir,
    databaseUrl: database?.url,
    token,
    async api(method, urlPath, body) {
      const response = await fetch(`${url}/dpc/v1${urlPath}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await response.text();
      if (!response.ok) throw new Error(`${method} ${urlPath}: ${response.status} ${text}`);
      return text ? JSON.parse(text) : undefined;
    },
    async another({ cpu } = {}) {
      const second = await serve(env, cpu, options.nodeFlags);
      return wrap(second.child, second.url);
    },
  };
}

/** A bare node:http server in its own process that answers `body` as JSON to every request. */
export async function startBareServer(body: string): Promise<BenchProcess> {
  const port = await freePort();
  const source = `require('node:http').createServer((q, s) => { q.resume(); q.on('end', () => { s.writeHead(200, { 'content-type': 'application/json; charset=utf-8' }); s.end(process.env.BODY); }); }).listen(${port}, '127.0.0.1');`;
  const child = spawn(process.execPath, ['-e', source], {
    env: { ...process.env, BODY: body },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(url, child);
  return wrap(child, url);
}

export interface LoadResult {
  requestsPerSecond: number;
  p99Ms: number;
  errors: number;
}

/** Drives `url` with CONNECTIONS connections for DURATION_SECONDS. */
export async function load(
  url: string,
  options: {
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    seconds?: number;
    connections?: number;
    /** autocannon's requests, e.g. with a setupRequest that makes each body unique */
    requests?: autocannon.Request[];
  } = {},
): Promise<LoadResult> {
  const result = await autocannon({
    url,
    method: (options.method ?? 'GET') as 'GET',
    headers: options.headers,
    body: options.body,
    connections: options.connections ?? CONNECTIONS,
    duration: options.seconds ?? DURATION_SECONDS,
    requests: options.requests,
  });
  return {
    requestsPerSecond: result.requests.average,
    p99Ms: result.latency.p99,
    errors: result.errors + result.non2xx,
  };
}

/**
 * A load generator far cheaper per request than autocannon: GETs of `url` on `connections` sockets,
 * each sending `depth` requests at once (HTTP/1.1 pipelining) and the next `depth` when all are
 * answered. Where the generator shares the CPUs with the servers it measures (2 CPUs), its cost per
 * request bounds what can be measured: 7-10 µs of CPU a request here, autocannon's 16-40 µs. It reads
 * answers framed by content-length only (what the server sends); latency is not measured, since a
 * pipelined request waits behind the others of its batch.
 */
export async function pipelinedLoad(
  url: string,
  options: { headers?: Record<string, string>; connections: number; depth: number; seconds?: number },
): Promise<{ requestsPerSecond: number; errors: number }> {
  const target = new URL(url);
  const fields = Object.entries({ host: target.host, ...options.headers }).map(([name, value]) => `${name}: ${value}\r\n`);
  const batch = Buffer.from(`GET ${target.pathname}${target.search} HTTP/1.1\r\n${fields.join('')}\r\n`.repeat(options.depth));
  let answered = 0;
  let errors = 0;
  let stopping = false;
  const sockets: Socket[] = [];
  const connection = () =>
    new Promise<void>((resolve, reject) => {
      let unread = Buffer.alloc(0); // an answer's start, read while the rest was not yet
      let awaited = 0;
      const send = () => {
        if (stopping) return socket.end();
        awaited = options.depth;
        socket.write(batch);
      };
      // Reads into one buffer of the connection's own (onread) rather than a new one per read.
      const onRead = (length: number, into: Uint8Array) => {
        const read = Buffer.from(into.buffer, into.byteOffset, length);
        const data = unread.length ? Buffer.concat([unread, read]) : read;
        let at = 0;
        for (let headEnd; (headEnd = data.indexOf('\r\n\r\n', at)) >= 0;) {
          const head = data.toString('latin1', at, headEnd);
          const contentLength = /\r\ncontent-length: *(\d+)/i.exec(head)?.[1];
          if (contentLength === undefined) {
            reject(new Error(`an answer without content-length: ${head}`));
            return false;
          }
          const end = headEnd + 4 + Number(contentLength);
          if (data.length < end) break;
          if (!head.startsWith('HTTP/1.1 2')) errors += 1;
          answered += 1;
          awaited -= 1;
          at = end;
        }
        unread = Buffer.from(data.subarray(at)); // a copy: the read buffer is reused
        if (awaited === 0) send();
        return true;
      };
      const socket = connect({
        port: Number(target.port),
        host: target.hostname,
        noDelay: true,
        onread: { buffer: Buffer.allocUnsafe(64 * 1024), callback: onRead },
      });
      sockets.push(socket);
      socket.on('connect', send);
      socket.on('error', reject);
      socket.on('close', () => resolve());
    });
  const finished = Promise.all(Array.from({ length: options.connections }, connection));
  try {
    const started = performance.now();
    await Promise.race([finished, new Promise((resolve) => setTimeout(resolve, (options.seconds ?? DURATION_SECONDS) * 1000))]);
    const requestsPerSecond = answered / ((performance.now() - started) / 1000);
    stopping = true;
    await finished;
    return { requestsPerSecond, errors };
  } finally {
    for (const socket of sockets) socket.destroy();
  }
}

/** A measured figure and its target: a row of the summary `npm run bench` prints at the end. */
export interface TargetRow {
  name: string;
  measured: number;
  /** what counts as met: at least / at most this much; none: printed only */
  atLeast?: number;
  atMost?: number;
}

const rows: TargetRow[] = [];

/** Adds a row to the summary: how a bench file contributes its ratios (and their targets). */
export function record(row: TargetRow): void {
  rows.push(row);
}

export function met(row: TargetRow): boolean | undefined {
  if (row.atLeast === undefined && row.atMost === undefined) return undefined;
  return (row.atLeast === undefined || row.measured >= row.atLeast) && (row.atMost === undefined || row.measured <= row.atMost);
}

export function recorded(): readonly TargetRow[] {
  return rows;
}

export interface Targets {
  /** subject req/s over bare req/s, at least */
  ratio?: number;
  /** the subject's p99 in ms, at most */
  p99Ms?: number;
}

/**
 * Prints each round of `subject` against `baseline` and records the median round's ratio (and the
 * subject's median p99) against `targets`.
 */
export function report(name: string, rounds: { subject: LoadResult; baseline: LoadResult }[], targets: Targets = {}): void {
  const ratios = rounds.map(({ subject, baseline }) => subject.requestsPerSecond / baseline.requestsPerSecond);
  rounds.forEach(({ subject, baseline }, i) =>
    console.log(
      `  round ${i + 1}: ${subject.requestsPerSecond.toFixed(0)} req/s, p99 ${subject.p99Ms} ms` +
        ` | bare node:http ${baseline.requestsPerSecond.toFixed(0)} req/s, p99 ${baseline.p99Ms} ms` +
        ` | ratio ${ratios[i].toFixed(2)}` +
        (subject.errors ? ` | ${subject.errors} errors` : ''),
    ),
  );
  const ratio = median(ratios);
  const p99Ms = median(rounds.map(({ subject }) => subject.p99Ms));
  console.log(
    `${name}: ${median(rounds.map(({ subject }) => subject.requestsPerSecond)).toFixed(0)} req/s, p99 ${p99Ms} ms` +
      ` | bare node:http ${median(rounds.map(({ baseline }) => baseline.requestsPerSecond)).toFixed(0)} req/s` +
      ` | ratio ${ratio.toFixed(2)} (median of ${rounds.length} rounds)`,
  );
  record({ name: `${name}: ratio to bare`, measured: ratio, atLeast: targets.ratio });
  if (targets.p99Ms !== undefined) record({ name: `${name}: p99 ms`, measured: p99Ms, atMost: targets.p99Ms });
}

/**
 * "One core for the server" (the measurement): where taskset and 2 or more CPUs exist, the
 * processes `pids` (all their threads) go to the last CPU and this process, the load generator, to the
 * others. Answers how to undo it.
 */
function pinApart(pids: number[]): () => void {
  const cpus = availableParallelism();
  if (!TASKSET || cpus < 2) return () => {};
  const all = `0-${cpus - 1}`;
  for (const pid of pids) spawnSync('taskset', ['-a', '-pc', String(cpus - 1), String(pid)]);
  spawnSync('taskset', ['-a', '-pc', `0-${cpus - 2}`, String(process.pid)]);
  return () => {
    for (const pid of [...pids, process.pid]) spawnSync('taskset', ['-a', '-pc', all, String(pid)]);
  };
}

/**
 * Loads the server's `path` (after a warm-up) and a bare server answering the same bytes, in turn for
 * ROUNDS rounds, with the same requests (`requests` may make each one different, e.g. a new name per
 * create), each on a CPU of its own (pinApart); prints each round and the median ratio.
 */
export async function againstBaseline(
  server: BenchServer,
  name: string,
  path: string,
  request: { method?: string; body?: string; requests?: autocannon.Request[]; targets?: Targets } = {},
): Promise<void> {
  const headers = { authorization: `Bearer ${server.token}`, 'content-type': 'application/json' };
  const url = `${server.url}/dpc/v1${path}`;
  const { targets, ...sent } = request;
  const sample = await (await fetch(url, { method: sent.method, body: sent.body, headers })).text();
  const bare = await startBareServer(sample);
  const unpin = pinApart([server.pid, bare.pid]);
  try {
    await load(url, { ...sent, headers, seconds: 2 }); // warm-up
    const rounds = [];
    for (let i = 0; i < ROUNDS; i += 1) {
      const subject = await load(url, { ...sent, headers });
      rounds.push({ subject, baseline: await load(bare.url, { ...sent, headers }) });
    }
    report(name, rounds, targets);
  } finally {
    unpin();
    await bare.stop();
  }
}
