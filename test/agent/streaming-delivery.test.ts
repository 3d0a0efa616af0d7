import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { StreamingProgress } from '../../src/contract/streaming.ts';
import { FolderStore, type ObjectStore } from '../../src/agent/streaming/object-store.ts';
import { runPostgresPipeline, type RunSettings } from '../../src/agent/streaming/pipeline.ts';
import { FileTarget } from '../../src/agent/streaming/target.ts';
import { loadState } from '../../src/agent/streaming/state.ts';
import type { PrivatePostgres } from '../helpers/private-postgres.ts';
import { postgresSourceOf, startLogicalSource, tempDir, until, type LogicalSource } from '../helpers/streaming.ts';

/**
 * Exactly once at the target, in-process against a private PostgreSQL cluster: a run that dies after writing
 * a batch's file but before committing its position (the worst moment) leaves a file the next run removes
 * before its replay writes those changes again, once. The position is never ahead of the target.
 */

const PIPELINE = '6f1c2b3a-0000-4000-8000-00000000d1e1';

let source: LogicalSource;
let cluster: PrivatePostgres;
let sql: pg.Client;
let stateDir: string;
let lakeDir: string;
const folder = () => path.join(lakeDir, 'cdc', 'public', 'items');

before(async () => {
  source = await startLogicalSource(['CREATE TABLE items (id integer PRIMARY KEY, label text)']);
  ({ cluster, sql } = source);
  stateDir = tempDir('dpc-cdc-state-');
  lakeDir = tempDir('dpc-cdc-lake-');
});
after(async () => {
  await source?.stop();
  for (const dir of [stateDir, lakeDir]) if (dir) rmSync(dir, { recursive: true, force: true });
});

function settings(target: ObjectStore, signal: AbortSignal, progress: StreamingProgress[], logs: string[]): RunSettings {
  return {
    pipelineId: PIPELINE,
    tables: [{ schema: 'public', table: 'items' }],
    advancedProperties: { 'snapshot.mode': 'never' },
    stateDir,
    source: postgresSourceOf(cluster),
    target: new FileTarget(target, 'cdc'),
    signal,
    report: (report) => progress.push(report),
    log: (message) => logs.push(message),
    batchChanges: 1,
  };
}

const files = () => readdirSync(folder()).filter((name) => name.endsWith('.jsonl'));
const ids = () =>
  files()
    .sort()
    .flatMap((name) => readFileSync(path.join(folder(), name), 'utf8').split('\n').filter(Boolean))
    .map((line) => (JSON.parse(line) as { after: { id: number } }).after.id);

test('a crash between the target write and the position commit: the next run removes the file and writes its changes once', async () => {
  const folderStore = new FolderStore(lakeDir);
  // Writes the first change file, then dies before the run can commit its position.
  let crashed = false;
  const crashing: ObjectStore = {
    async put(key, body) {
      await folderStore.put(key, body);
      if (!crashed && !key.includes('-snapshot-')) {
        crashed = true;
        throw new Error('simulated crash after the target write');
      }
    },
    list: (prefix) => folderStore.list(prefix),
    remove: (key) => folderStore.remove(key),
    describe: () => 'crashing',
  };
  const progress: StreamingProgress[] = [];
  const first = runPostgresPipeline(settings(crashing, new AbortController().signal, progress, []));
  await until('the first run streams', () => progress.some((report) => report.phase === 'streaming'));
  const startedAt = (await loadState(stateDir, PIPELINE))!.position;
  for (let id = 1; id <= 3; id += 1) await sql.query('INSERT INTO items VALUES ($1, $2)', [id, `item ${id}`]);
  await assert.rejects(first, /simulated crash after the target write/);
  assert.equal(files().length, 1, 'the file was written');
  assert.equal((await loadState(stateDir, PIPELINE))!.position, startedAt, 'the position was not committed');

  for (let id = 4; id <= 6; id += 1) await sql.query('INSERT INTO items VALUES ($1, $2)', [id, `item ${id}`]);
  const stop = new AbortController();
  const logs: string[] = [];
  const second = runPostgresPipeline(settings(folderStore, stop.signal, [], logs));
  await until('every change is written', () => ids().length >= 6);
  stop.abort();
  const end = await second;
  assert.ok(logs.includes('removing a change file written after the last committed position'), logs.join('\n'));
  assert.deepEqual(ids(), [1, 2, 3, 4, 5, 6], 'each change once, in order');
  assert.equal(end.state, 'STOPPED');
  assert.deepEqual(end.rowsPerTable, { 'public.items': 6 });
  const state = (await loadState(stateDir, PIPELINE))!;
  assert.equal(state.position, end.position);
  // The slot was acknowledged only up to the committed position, never beyond.
  const slot = await sql.query<{ confirmed_flush_lsn: string }>(
    'SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1',
    [`dpc_${PIPELINE.replaceAll('-', '')}`],
  );
  const value = (lsn: string) => {
    const [high, low] = lsn.split('/');
    return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`);
  };
  assert.ok(value(slot.rows[0]!.confirmed_flush_lsn) <= value(state.position) + 1n, 'acknowledged no further than committed');
});

test('a table without a replica identity is refused before it is published (its updates would fail at the source)', async () => {
  await sql.query('CREATE TABLE unkeyed (id integer, label text)');
  const run = runPostgresPipeline({
    ...settings(new FolderStore(lakeDir), new AbortController().signal, [], []),
    pipelineId: '6f1c2b3a-0000-4000-8000-00000000d1e2',
    tables: [{ schema: 'public', table: 'unkeyed' }],
  });
  await assert.rejects(
    run,
    /the table public\.unkeyed has no replica identity \(no primary key\); add one or set REPLICA IDENTITY FULL/,
  );
  await sql.query("UPDATE unkeyed SET label = 'still works'");
  await sql.query('ALTER TABLE unkeyed REPLICA IDENTITY FULL');
  const stop = new AbortController();
  const progress: StreamingProgress[] = [];
  const accepted = runPostgresPipeline({
    ...settings(new FolderStore(lakeDir), stop.signal, progress, []),
    pipelineId: '6f1c2b3a-0000-4000-8000-00000000d1e2',
    tables: [{ schema: 'public', table: 'unkeyed' }],
  });
  await until('it streams with REPLICA IDENTITY FULL', () => progress.some((report) => report.phase === 'streaming'));
  stop.abort();
  assert.equal((await accepted).state, 'STOPPED');
});

test('only other tables change: keepalives move the slot on (confirmed_flush_lsn advances), so the source does not keep WAL for ever', async () => {
  const pipelineId = '6f1c2b3a-0000-4000-8000-00000000d1e3';
  const slot = `dpc_${pipelineId.replaceAll('-', '')}`;
  await sql.query('CREATE TABLE quiet (id integer PRIMARY KEY)');
  await sql.query('CREATE TABLE busy (id integer PRIMARY KEY, filler text)');
  const confirmed = async () =>
    (
      await sql.query<{ confirmed: string }>(
        "SELECT confirmed_flush_lsn - '0/0'::pg_lsn AS confirmed FROM pg_replication_slots WHERE slot_name = $1",
        [slot],
      )
    ).rows[0]!.confirmed;
  const start = (signal: AbortSignal, progress: StreamingProgress[]) =>
    runPostgresPipeline({
      ...settings(new FolderStore(lakeDir), signal, progress, []),
      pipelineId,
      tables: [{ schema: 'public', table: 'quiet' }],
    });
  let stop = new AbortController();
  let progress: StreamingProgress[] = [];
  let running = start(stop.signal, progress);
  await until('it streams', () => progress.some((report) => report.phase === 'streaming'));
  const before = BigInt(await confirmed());
  const position = (await loadState(stateDir, pipelineId))!.position;
  for (let i = 1; i <= 200; i += 1) await sql.query("INSERT INTO busy VALUES ($1, repeat('x', 1000))", [i]);
  const written = BigInt((await sql.query<{ at: string }>("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS at")).rows[0]!.at);
  await until("the slot is confirmed past the other table's changes", async () => BigInt(await confirmed()) >= written, {
    timeoutMs: 30_000,
  });
  assert.ok(written > before);
  assert.equal((await loadState(stateDir, pipelineId))!.position, position, "no change of the pipeline's tables was written");
  stop.abort();
  await running;

  // Nothing is lost by the advance: a change made while stopped arrives on the next start.
  await sql.query('INSERT INTO quiet VALUES (1)');
  stop = new AbortController();
  progress = [];
  running = start(stop.signal, progress);
  const quietFolder = path.join(lakeDir, 'cdc', 'public', 'quiet');
  const quietIds = () =>
    (existsSync(quietFolder) ? readdirSync(quietFolder) : [])
      .flatMap((name) => readFileSync(path.join(quietFolder, name), 'utf8').split('\n').filter(Boolean))
      .map((line) => (JSON.parse(line) as { after: { id: number } }).after.id);
  await until('the change made while stopped arrives', () => quietIds().length === 1);
  stop.abort();
  await running;
  assert.deepEqual(quietIds(), [1]);
});
