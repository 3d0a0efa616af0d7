import assert from 'node:assert/strict';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { parquetReadObjects } from 'hyparquet';
import type { StreamingProgress } from '../../src/contract/streaming.ts';
import { FolderStore } from '../../src/agent/streaming/object-store.ts';
import { runPostgresPipeline } from '../../src/agent/streaming/pipeline.ts';
import { FileTarget } from '../../src/agent/streaming/target.ts';
import { fileFormatOf } from '../../src/agent/streaming/handlers.ts';
import type { PrivatePostgres } from '../helpers/private-postgres.ts';
import { postgresSourceOf, startLogicalSource, tempDir, type LogicalSource } from '../helpers/streaming.ts';

/**
 * Change files as Parquet (`advancedProperties["file.format"]: "parquet"`), in-process against a private
 * PostgreSQL cluster: the snapshot and each change read back with a Parquet reader (hyparquet) hold what
 * the JSON lines would.
 */

const PIPELINE = '6f1c2b3a-0000-4000-8000-00000000aa01';

let source: LogicalSource;
let cluster: PrivatePostgres;
let sql: pg.Client;
let stateDir: string;
let lakeDir: string;
const folder = () => path.join(lakeDir, 'cdc', 'public', 'items');

before(async () => {
  source = await startLogicalSource([
    'CREATE TABLE items (id integer PRIMARY KEY, label text, qty numeric)',
    "INSERT INTO items VALUES (1, 'apple', 1.5), (2, 'pear', 2)",
  ]);
  ({ cluster, sql } = source);
  stateDir = tempDir('dpc-cdc-state-');
  lakeDir = tempDir('dpc-cdc-lake-');
});
after(async () => {
  await source?.stop();
  for (const dir of [stateDir, lakeDir]) if (dir) rmSync(dir, { recursive: true, force: true });
});

async function events(): Promise<Record<string, unknown>[]> {
  const names = readdirSync(folder()).sort();
  assert.ok(names.length > 0 && names.every((name) => name.endsWith('.parquet')), names.join(', '));
  const rows: Record<string, unknown>[] = [];
  for (const name of names) {
    const bytes = readFileSync(path.join(folder(), name));
    const file = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    rows.push(...(await parquetReadObjects({ file })));
  }
  return rows;
}

test('a snapshot and every kind of change written as Parquet files, read back by a Parquet reader', async () => {
  const progress: StreamingProgress[] = [];
  const stop = new AbortController();
  const run = runPostgresPipeline({
    pipelineId: PIPELINE,
    tables: [{ schema: 'public', table: 'items' }],
    advancedProperties: { 'snapshot.mode': 'initial', 'file.format': 'parquet' },
    stateDir,
    source: postgresSourceOf(cluster),
    target: new FileTarget(new FolderStore(lakeDir), 'cdc', 'parquet'),
    signal: stop.signal,
    report: (report) => progress.push(report),
    log: () => undefined,
    batchChanges: 2,
  });
  const deadline = Date.now() + 30_000;
  while (!progress.some((report) => report.phase === 'streaming') && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  await sql.query("INSERT INTO items VALUES (3, 'plum', 3)");
  await sql.query("UPDATE items SET label = 'green apple' WHERE id = 1");
  await sql.query('DELETE FROM items WHERE id = 2');
  while (Date.now() < deadline) {
    if ((await events().catch(() => [])).length >= 5) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  stop.abort();
  assert.equal((await run).state, 'STOPPED');
  // The JSON columns come back as their text; parsed here as a reader of JSON columns would.
  const read = (await events()).map((event): Record<string, unknown> => ({
    ...event,
    before: event.before === null ? null : JSON.parse(String(event.before)),
    after: event.after === null ? null : JSON.parse(String(event.after)),
  }));
  assert.deepEqual(
    read.map((event) => [
      event.op,
      event.schema,
      event.table,
      (event.after as { id?: number } | null)?.id ?? (event.before as { id: number }).id,
    ]),
    [
      ['snapshot', 'public', 'items', 1],
      ['snapshot', 'public', 'items', 2],
      ['insert', 'public', 'items', 3],
      ['update', 'public', 'items', 1],
      ['delete', 'public', 'items', 2],
    ],
  );
  const update = read[3]!;
  assert.deepEqual(update.after, { id: 1, label: 'green apple', qty: '1.5' });
  assert.equal(typeof update.xid, 'bigint');
  assert.match(String(update.commitTime), /^\d{4}-\d{2}-\d{2}T/);
  assert.match(String(update.lsn), /^[0-9A-F]+\/[0-9A-F]+$/);
});

test('file.format is jsonl unless it says parquet; another value fails the start naming it', () => {
  const payload = (advancedProperties?: Record<string, string>) =>
    ({ definition: { advancedProperties } }) as unknown as Parameters<typeof fileFormatOf>[0];
  assert.equal(fileFormatOf(payload()), 'jsonl');
  assert.equal(fileFormatOf(payload({ 'file.format': 'parquet' })), 'parquet');
  assert.throws(
    () => fileFormatOf(payload({ 'file.format': 'avro' })),
    /advancedProperties\.file\.format is avro; this agent writes jsonl or parquet/,
  );
});
