/**
 * Streaming CDC: PostgreSQL change data capture into the local folder target, on a private cluster
 * (wal_level=logical) started by the bench.
 *
 * - Throughput: 100,000 row changes (BENCH_CDC_CHANGES) committed while two slots wait; then the agent's
 *   pipeline (runPostgresPipeline: pgoutput decoded, JSON-lines files, fsync'd position) and
 *   `pg_recvlogical` (pgoutput's raw bytes to a file) each read their slot to the end. Rounds alternate
 *   which goes first; the median of agent rate / pg_recvlogical rate is the measure (target: at least 0.5).
 * - Lag: 1,000 changes/s (50 transactions of 20 rows a second) for 10 s into the running pipeline; a change's
 *   lag is the time from its commit to the end of the write of its file. Target: p99 at most 2 s.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { FolderStore, type ObjectStore } from '../src/agent/streaming/object-store.ts';
import { runPostgresPipeline } from '../src/agent/streaming/pipeline.ts';
import { FileTarget } from '../src/agent/streaming/target.ts';
import { PostgresSource } from '../src/agent/streaming/postgres.ts';
import { loadState } from '../src/agent/streaming/state.ts';
import { startPrivatePostgres } from '../test/helpers/private-postgres.ts';
import { median, record } from './lib.ts';

const CHANGES = Number(process.env.BENCH_CDC_CHANGES ?? 100_000);
const CDC_ROUNDS = Number(process.env.BENCH_CDC_ROUNDS ?? 3);
const LAG_SECONDS = Number(process.env.BENCH_CDC_LAG_SECONDS ?? 10);
const PIPELINE = '5e7c0000-0000-4000-8000-00000000be0c';
const BASELINE_SLOT = 'bench_recvlogical';
const PUBLICATION = `dpc_${PIPELINE.replaceAll('-', '')}`;

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

export async function bench(): Promise<void> {
  const cluster = await startPrivatePostgres({ wal_level: 'logical', max_wal_size: '4GB' });
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-cdc-'));
  const sql = new pg.Client(cluster.url);
  await sql.connect();
  try {
    await sql.query(
      'CREATE TABLE changes (id bigint PRIMARY KEY, label text NOT NULL, amount numeric NOT NULL, at timestamptz NOT NULL)',
    );
    const source = new PostgresSource({
      host: cluster.host,
      port: cluster.port,
      database: 'postgres',
      user: cluster.user,
      password: cluster.password,
    });
    const stateDir = path.join(dir, 'state');
    const lake = path.join(dir, 'lake');
    const run = (target: ObjectStore, signal: AbortSignal) =>
      runPostgresPipeline({
        pipelineId: PIPELINE,
        tables: [{ schema: 'public', table: 'changes' }],
        advancedProperties: { 'snapshot.mode': 'never' },
        stateDir,
        source,
        target: new FileTarget(target, 'bench'),
        signal,
        report: () => undefined,
        log: () => undefined,
      });
    // The pipeline's slot and publication, made by a first start; pg_recvlogical's slot beside it.
    {
      const stop = new AbortController();
      const first = run(new FolderStore(lake), stop.signal);
      for (let i = 0; i < 200 && !(await loadState(stateDir, PIPELINE)); i += 1) await new Promise((r) => setTimeout(r, 50));
      await new Promise((r) => setTimeout(r, 300));
      stop.abort();
      await first;
    }
    await sql.query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [BASELINE_SLOT]);

    const ratios: number[] = [];
    // The agent's CPU time (user + system of this process, which runs the pipeline in-process) while it reads
    // the round's changes: less sensitive to other load on the machine than the rate.
    const agentCpuMs: number[] = [];
    let nextId = 1;
    for (let round = 0; round < CDC_ROUNDS; round += 1) {
      // 100 transactions of CHANGES/100 rows: inserts, then a third of them updated (changes counted once each).
      const perTransaction = Math.max(1, Math.floor(CHANGES / 100));
      const inserts = Math.round((CHANGES * 2) / 3);
      const updates = CHANGES - inserts;
      const firstId = nextId;
      for (let done = 0; done < inserts; done += perTransaction) {
        const count = Math.min(perTransaction, inserts - done);
        await sql.query(
          `INSERT INTO changes SELECT g, 'label ' || g, g * 1.25, now() FROM generate_series($1::bigint, $2::bigint) AS g`,
          [nextId, nextId + count - 1],
        );
        nextId += count;
      }
      for (let done = 0; done < updates; done += perTransaction) {
        const count = Math.min(perTransaction, updates - done);
        await sql.query('UPDATE changes SET amount = amount + 1 WHERE id BETWEEN $1 AND $2', [
          firstId + done,
          firstId + done + count - 1,
        ]);
      }
      const end = (await sql.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;

      const viaAgent = async () => {
        const before = (await loadState(stateDir, PIPELINE))!.rowsPerTable['public.changes'] ?? 0;
        const stop = new AbortController();
        const cpuBefore = process.cpuUsage();
        const started = performance.now();
        const running = run(new FolderStore(lake), stop.signal);
        for (;;) {
          const state = await loadState(stateDir, PIPELINE);
          if ((state?.rowsPerTable['public.changes'] ?? 0) - before >= CHANGES) break;
          await new Promise((r) => setTimeout(r, 5));
        }
        const elapsed = performance.now() - started;
        const cpu = process.cpuUsage(cpuBefore);
        agentCpuMs.push((cpu.user + cpu.system) / 1000);
        stop.abort();
        await running;
        return elapsed;
      };
      const viaRecvlogical = async () => {
        const file = path.join(dir, `recvlogical-${round}.bin`);
        const started = performance.now();
        const child = spawn(
          path.join(cluster.binDir, 'pg_recvlogical'),
          [
            '-d',
            cluster.url,
            '-S',
            BASELINE_SLOT,
            '--start',
            '--no-loop',
            `--endpos=${end}`,
            '-o',
            'proto_version=1',
            '-o',
            `publication_names=${PUBLICATION}`,
            '-f',
            file,
          ],
          { stdio: ['ignore', 'ignore', 'pipe'] },
        );
        let errors = '';
        child.stderr.on('data', (chunk) => (errors += chunk));
        const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
        if (code !== 0) throw new Error(`pg_recvlogical failed: ${errors}`);
        const elapsed = performance.now() - started;
        if (statSync(file).size === 0) throw new Error('pg_recvlogical wrote nothing');
        rmSync(file);
        return elapsed;
      };
      const [agentMs, baselineMs] =
        round % 2 === 0
          ? [await viaAgent(), await viaRecvlogical()]
          : await viaRecvlogical().then(async (baseline) => [await viaAgent(), baseline]);
      const ratio = CHANGES / agentMs / (CHANGES / baselineMs);
      ratios.push(ratio);
      console.log(
        `round ${round + 1}: ${CHANGES} changes; agent to folder ${agentMs.toFixed(0)} ms (${((CHANGES / agentMs) * 1000).toFixed(0)}/s), ` +
          `pg_recvlogical ${baselineMs.toFixed(0)} ms (${((CHANGES / baselineMs) * 1000).toFixed(0)}/s), ratio ${ratio.toFixed(2)}; ` +
          `agent CPU ${agentCpuMs.at(-1)!.toFixed(0)} ms (${((agentCpuMs.at(-1)! / CHANGES) * 100_000).toFixed(0)} ms per 100,000 changes)`,
      );
    }
    const ratio = median(ratios);
    console.log(
      `streaming-cdc: agent rate / pg_recvlogical rate = ${ratio.toFixed(2)} (median of ${CDC_ROUNDS}); ` +
        `agent CPU per 100,000 changes ${((median(agentCpuMs) / CHANGES) * 100_000).toFixed(0)} ms (median)`,
    );
    record({
      name: `streaming-cdc: ${CHANGES} changes PG -> folder, agent / pg_recvlogical rate`,
      measured: ratio,
      atLeast: 0.5,
    });

    // Lag at 1,000 changes/s.
    const lags: number[] = [];
    const folder = new FolderStore(lake);
    const timed: ObjectStore = {
      async put(key, body) {
        await folder.put(key, body);
        const written = Date.now();
        for (const line of String(body).split('\n')) {
          if (line) lags.push((written - Date.parse((JSON.parse(line) as { commitTime: string }).commitTime)) / 1000);
        }
      },
      list: (prefix) => folder.list(prefix),
      remove: (key) => folder.remove(key),
      describe: () => 'timed folder',
    };
    const stop = new AbortController();
    const running = run(timed, stop.signal);
    await new Promise((r) => setTimeout(r, 500));
    const writer = new pg.Client(cluster.url);
    await writer.connect();
    const started = Date.now();
    let sent = 0;
    for (let tick = 0; tick < LAG_SECONDS * 50; tick += 1) {
      const due = started + tick * 20;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      await writer.query(
        `INSERT INTO changes SELECT g, 'lag ' || g, 1, now() FROM generate_series($1::bigint, $2::bigint) AS g`,
        [nextId, nextId + 19],
      );
      nextId += 20;
      sent += 20;
    }
    const rate = sent / ((Date.now() - started) / 1000);
    await writer.end();
    for (let i = 0; i < 100 && lags.length < sent; i += 1) await new Promise((r) => setTimeout(r, 100));
    stop.abort();
    await running;
    const p50 = percentile(lags, 50);
    const p99 = percentile(lags, 99);
    console.log(
      `lag at ${rate.toFixed(0)} changes/s for ${LAG_SECONDS} s: ${lags.length} of ${sent} changes written, p50 ${p50.toFixed(3)} s, p99 ${p99.toFixed(3)} s`,
    );
    if (lags.length < sent) throw new Error(`only ${lags.length} of ${sent} changes were written`);
    record({ name: 'streaming-cdc: end-to-end lag p99 at 1,000 changes/s (s)', measured: p99, atMost: 2 });
    const files = readdirSync(path.join(lake, 'bench', 'public', 'changes')).length;
    const sample = readFileSync(
      path.join(lake, 'bench', 'public', 'changes', readdirSync(path.join(lake, 'bench', 'public', 'changes'))[0]!),
      'utf8',
    );
    console.log(`${files} files written; a line: ${sample.split('\n')[0]}`);
  } finally {
    await sql.query(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots`).catch(() => undefined);
    await sql.end();
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
