import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import type { StreamingProgress } from '../../src/contract/streaming.ts';
import { startStreamingPipeline } from '../../src/agent/streaming/handlers.ts';
import { describeMysqlTable, runMysqlPipeline } from '../../src/agent/streaming/mysql.ts';
import { runPostgresPipeline } from '../../src/agent/streaming/pipeline.ts';
import { loadState } from '../../src/agent/streaming/state.ts';
import { WarehouseTarget, type TemporalMapping, type TransformationType } from '../../src/agent/streaming/warehouse-target.ts';
import { DuckDbWarehouse, type Warehouse } from '../../src/agent/warehouse/index.ts';
import type { WorkContext } from '../../src/agent/work-context.ts';
import { startPrivateMariadb } from '../helpers/private-mariadb.ts';
import type { PrivatePostgres } from '../helpers/private-postgres.ts';
import { postgresSourceOf, startLogicalSource, tempDir, until, type LogicalSource } from '../helpers/streaming.ts';

/**
 * Warehouse tables as the target (what the agent does for a `snowflake` target), in-process: a private
 * PostgreSQL cluster as the source, the embedded DuckDB as the warehouse. Per source table a change table
 * and an applied copy; a crash between the warehouse's commit and the state folder's resumes from the
 * warehouse's own position, so each change is in the warehouse once.
 */

let logical: LogicalSource;
let cluster: PrivatePostgres;
let sql: pg.Client;
let dir: string;
const signal = new AbortController().signal;

before(async () => {
  logical = await startLogicalSource();
  ({ cluster, sql } = logical);
  dir = tempDir('dpc-cdc-warehouse-');
});
after(async () => {
  await logical?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const source = () => postgresSourceOf(cluster);

async function duckdb(name: string): Promise<Warehouse> {
  return DuckDbWarehouse.open(path.join(dir, `${name}.duckdb`));
}

function run(
  pipelineId: string,
  table: string,
  warehouse: Warehouse,
  options: {
    transformationType: TransformationType;
    temporalMapping?: TemporalMapping;
    stop: AbortSignal;
    progress?: StreamingProgress[];
  },
) {
  const postgres = source();
  return runPostgresPipeline({
    pipelineId,
    tables: [{ schema: 'public', table }],
    advancedProperties: { 'snapshot.mode': 'initial' },
    stateDir: path.join(dir, 'state'),
    source: postgres,
    target: new WarehouseTarget({
      warehouse,
      pipelineId,
      schema: 'cdc',
      tablePrefixType: 'none',
      sourceDatabase: 'postgres',
      transformationType: options.transformationType,
      temporalMapping: options.temporalMapping ?? 'native',
      catalog: postgres,
    }),
    signal: options.stop,
    report: (report) => options.progress?.push(report),
    log: () => undefined,
    batchChanges: 1,
  });
}

const rows = async (warehouse: Warehouse, query: string) => (await warehouse.query(query, signal)).rows;

test('copy_table: a change table with every change, an applied copy by key; a new column reaches both', async () => {
  await sql.query('CREATE TABLE items (id integer PRIMARY KEY, label text, qty bigint, at timestamptz, day date, doc jsonb)');
  await sql.query(
    `INSERT INTO items VALUES (1, 'one', 1, '2026-01-02T03:04:05.678Z', '2026-01-02', '{"a": 1}'), (2, 'two', 2, NULL, NULL, NULL)`,
  );
  const warehouse = await duckdb('copy');
  const stop = new AbortController();
  const progress: StreamingProgress[] = [];
  const running = run('6f1c2b3a-0000-4000-8000-0000000000a1', 'items', warehouse, {
    transformationType: 'copy_table',
    stop: stop.signal,
    progress,
  });
  await until('it streams', () => progress.some((report) => report.phase === 'streaming'));
  await sql.query("INSERT INTO items VALUES (3, 'three', 3, NULL, NULL, NULL)");
  await sql.query("UPDATE items SET label = 'ONE', qty = 10 WHERE id = 1");
  await sql.query('UPDATE items SET id = 20 WHERE id = 2');
  await sql.query('DELETE FROM items WHERE id = 3');
  await sql.query('ALTER TABLE items ADD COLUMN note text');
  await sql.query("INSERT INTO items (id, label, note) VALUES (4, 'four', 'a new column')");
  const changes = async () => rows(warehouse, 'SELECT * FROM cdc.items_changes ORDER BY _dpc_position_key, _dpc_seq');
  await until('every change is in the change table', async () => (await changes()).length >= 7);
  const all = await changes();
  assert.deepEqual(
    all.map((row) => [row._dpc_op, row.id]),
    [
      ['snapshot', 1],
      ['snapshot', 2],
      ['insert', 3],
      ['update', 1],
      ['update', 20],
      ['delete', 3],
      ['insert', 4],
    ],
  );
  assert.equal(all.length, 7);
  assert.equal(all[6]!.note, 'a new column', 'the new column is in the change table');
  assert.equal(JSON.parse(String(all[4]!._dpc_before)).id, 2, 'a key-changing update carries the old key');
  assert.match(String(all[2]!._dpc_position), /^[0-9A-F]+\/[0-9A-F]+$/);
  assert.ok(!Number.isNaN(Date.parse(String(all[2]!._dpc_commit_time))));
  const applied = await rows(warehouse, 'SELECT id, label, qty, note, "at", day, doc FROM cdc.items ORDER BY id');
  assert.deepEqual(
    applied.map((row) => [row.id, row.label, row.qty, row.note]),
    [
      [1, 'ONE', 10, null],
      [4, 'four', null, 'a new column'],
      [20, 'two', 2, null],
    ],
  );
  assert.equal(new Date(String(applied[0]!.at)).toISOString(), '2026-01-02T03:04:05.678Z');
  assert.equal(String(applied[0]!.day).slice(0, 10), '2026-01-02');
  assert.deepEqual(JSON.parse(String(applied[0]!.doc)), { a: 1 });
  const types = Object.fromEntries(
    (
      await rows(
        warehouse,
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'cdc' AND table_name = 'items'",
      )
    ).map((row) => [row.column_name, row.data_type]),
  );
  assert.equal(types.qty, 'BIGINT');
  assert.equal(types.at, 'TIMESTAMP WITH TIME ZONE');
  assert.equal(types.day, 'DATE');
  assert.equal(types.note, 'VARCHAR');

  await sql.query('TRUNCATE items');
  await sql.query("INSERT INTO items (id, label) VALUES (5, 'after the truncate')");
  await until('the truncate is applied', async () => (await changes()).length >= 9);
  assert.deepEqual(
    (await changes()).slice(7).map((row) => row._dpc_op),
    ['truncate', 'insert'],
  );
  assert.deepEqual(
    (await rows(warehouse, 'SELECT id FROM cdc.items')).map((row) => row.id),
    [5],
  );
  stop.abort();
  const end = await running;
  assert.deepEqual(end.rowsPerTable, { 'public.items': 9 });
  const position = await rows(
    warehouse,
    "SELECT position FROM cdc._dpc_streaming_positions WHERE pipeline_id = '6f1c2b3a-0000-4000-8000-0000000000a1'",
  );
  assert.equal(position[0]!.position, end.position, 'the warehouse holds the position it committed with the changes');
});

test('an update that leaves a large (TOASTed) value unchanged keeps it in the applied copy', async () => {
  await sql.query('CREATE TABLE docs (id integer PRIMARY KEY, title text, body text)');
  // Incompressible, so PostgreSQL keeps it out of line (TOAST), and pgoutput leaves it out of updates that do not change it.
  const body = (await sql.query<{ body: string }>("SELECT string_agg(md5(i::text), '') AS body FROM generate_series(1, 400) i"))
    .rows[0]!.body;
  await sql.query('INSERT INTO docs VALUES (1, $1, $2), (2, $1, $2)', ['first', body]);
  const warehouse = await duckdb('toast');
  const stop = new AbortController();
  const progress: StreamingProgress[] = [];
  const running = run('6f1c2b3a-0000-4000-8000-0000000000a6', 'docs', warehouse, {
    transformationType: 'copy_table',
    stop: stop.signal,
    progress,
  });
  await until('it streams', () => progress.some((report) => report.phase === 'streaming'));
  await sql.query("UPDATE docs SET title = 'second' WHERE id = 1");
  // In one transaction (one batch): an insert, then an update leaving the value out.
  await sql.query('BEGIN');
  await sql.query("INSERT INTO docs VALUES (3, 'third', $1)", [body]);
  await sql.query("UPDATE docs SET title = 'third, again' WHERE id = 3");
  await sql.query('COMMIT');
  const applied = async () => rows(warehouse, 'SELECT id, title, body FROM cdc.docs ORDER BY id');
  await until('the updates are applied', async () => (await applied()).length === 3 && (await applied())[0]!.title === 'second');
  stop.abort();
  await running;
  assert.deepEqual(
    (await applied()).map((row) => [row.id, row.title, row.body === body]),
    [
      [1, 'second', true],
      [2, 'first', true],
      [3, 'third, again', true],
    ],
  );
});

test('a crash after the warehouse committed a batch but before the state folder did: the next run resumes from the warehouse, each change once', async () => {
  await sql.query('CREATE TABLE crashes (id integer PRIMARY KEY, label text)');
  const pipelineId = '6f1c2b3a-0000-4000-8000-0000000000a2';
  const real = await duckdb('crash');
  let writes = 0;
  // Commits each statement script, then dies after the second streaming batch is committed (not the snapshot's).
  const crashing: Warehouse = Object.assign(Object.create(real) as Warehouse, {
    async run(script: string, abort: AbortSignal) {
      const result = await real.run(script, abort);
      if (script.includes('INSERT INTO "cdc"."crashes_changes"') && script.includes("'insert'")) {
        writes += 1;
        if (writes === 2) throw new Error('simulated crash after the warehouse commit');
      }
      return result;
    },
    close: async () => undefined,
  });
  const progress: StreamingProgress[] = [];
  const first = run(pipelineId, 'crashes', crashing, {
    transformationType: 'copy_table',
    stop: new AbortController().signal,
    progress,
  });
  await until('the first run streams', () => progress.some((report) => report.phase === 'streaming'));
  for (let id = 1; id <= 3; id += 1) await sql.query('INSERT INTO crashes VALUES ($1, $2)', [id, `item ${id}`]);
  await assert.rejects(first, /simulated crash after the warehouse commit/);
  const state = (await loadState(path.join(dir, 'state'), pipelineId))!;
  const held = await rows(real, `SELECT position FROM cdc._dpc_streaming_positions WHERE pipeline_id = '${pipelineId}'`);
  assert.notEqual(held[0]!.position, state.position, 'the warehouse is one batch ahead of the state folder');

  for (let id = 4; id <= 5; id += 1) await sql.query('INSERT INTO crashes VALUES ($1, $2)', [id, `item ${id}`]);
  await sql.query('DELETE FROM crashes WHERE id = 1');
  const stop = new AbortController();
  const second = run(pipelineId, 'crashes', real, { transformationType: 'copy_table', stop: stop.signal });
  const changes = async () => rows(real, 'SELECT _dpc_op, id FROM cdc.crashes_changes ORDER BY _dpc_position_key, _dpc_seq');
  await until('every change is in the warehouse', async () => (await changes()).length >= 6);
  await new Promise((resolve) => setTimeout(resolve, 500));
  stop.abort();
  const end = await second;
  assert.deepEqual(
    (await changes()).map((row) => [row._dpc_op, row.id]),
    [
      ['insert', 1],
      ['insert', 2],
      ['insert', 3],
      ['insert', 4],
      ['insert', 5],
      ['delete', 1],
    ],
    'each change once, in order',
  );
  assert.deepEqual(
    (await rows(real, 'SELECT id FROM cdc.crashes ORDER BY id')).map((row) => row.id),
    [2, 3, 4, 5],
  );
  assert.deepEqual(end.rowsPerTable, { 'public.crashes': 6 });
});

test('copy_table_soft_delete marks deleted and truncated rows; temporalMapping epoch writes times as milliseconds', async () => {
  await sql.query('CREATE TABLE soft (id integer PRIMARY KEY, at timestamptz)');
  await sql.query("INSERT INTO soft VALUES (1, '2026-01-01T00:00:01Z')");
  const warehouse = await duckdb('soft');
  const stop = new AbortController();
  const progress: StreamingProgress[] = [];
  const running = run('6f1c2b3a-0000-4000-8000-0000000000a3', 'soft', warehouse, {
    transformationType: 'copy_table_soft_delete',
    temporalMapping: 'epoch',
    stop: stop.signal,
    progress,
  });
  await until('it streams', () => progress.some((report) => report.phase === 'streaming'));
  await sql.query("INSERT INTO soft VALUES (2, '2026-01-01T00:00:02Z'), (3, NULL)");
  await sql.query('DELETE FROM soft WHERE id = 1');
  const applied = async () => rows(warehouse, 'SELECT id, "at", _dpc_deleted, _dpc_commit_time FROM cdc.soft ORDER BY id');
  await until('the delete is applied', async () => (await applied()).some((row) => row.id === 1 && row._dpc_deleted === true));
  assert.deepEqual(
    (await applied()).map((row) => [row.id, row.at, row._dpc_deleted]),
    [
      [1, Date.parse('2026-01-01T00:00:01Z'), true],
      [2, Date.parse('2026-01-01T00:00:02Z'), false],
      [3, null, false],
    ],
  );
  assert.equal(typeof (await applied())[1]!._dpc_commit_time, 'number', 'commit times are epoch milliseconds too');
  await sql.query('TRUNCATE soft');
  await until('the truncate marks every row', async () => (await applied()).every((row) => row._dpc_deleted === true));
  assert.equal((await applied()).length, 3);
  stop.abort();
  await running;
});

test('change_log keeps the change table only; a value the agent does not know is refused by name', async () => {
  await sql.query('CREATE TABLE logged (id integer PRIMARY KEY)');
  await sql.query('INSERT INTO logged VALUES (1)');
  const warehouse = await duckdb('log');
  const stop = new AbortController();
  const progress: StreamingProgress[] = [];
  const running = run('6f1c2b3a-0000-4000-8000-0000000000a4', 'logged', warehouse, {
    transformationType: 'change_log',
    stop: stop.signal,
    progress,
  });
  await until('it streams', () => progress.some((report) => report.phase === 'streaming'));
  await sql.query('DELETE FROM logged');
  await until('the delete is logged', async () => (await rows(warehouse, 'SELECT * FROM cdc.logged_changes')).length === 2);
  stop.abort();
  await running;
  const tables = await rows(
    warehouse,
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'cdc' ORDER BY table_name",
  );
  assert.deepEqual(
    tables.map((row) => row.table_name),
    ['_dpc_streaming_positions', 'logged_changes'],
  );

  const ctx = {
    signal,
    vault: { read: async () => undefined },
    stateDir: path.join(dir, 'refused'),
    log: () => undefined,
    report: async () => undefined,
  } as unknown as WorkContext;
  const work = (target: Record<string, unknown>) => ({
    workId: 'w',
    kind: 'streaming-pipeline-start',
    delivery: 1,
    payload: {
      streamingPipelineId: '6f1c2b3a-0000-4000-8000-0000000000a5',
      definition: {
        advancedProperties: {},
        streamingSource: {
          type: 'postgres',
          connection: { host: cluster.host, port: cluster.port, database: 'postgres', username: cluster.user },
          tables: [{ schema: 'public', table: 'logged' }],
        },
        streamingTarget: {
          type: 'snowflake',
          tableSchema: 'cdc',
          tablePrefixType: 'none',
          transformationType: 'copy_table',
          ...target,
        },
      },
    },
  });
  await assert.rejects(startStreamingPipeline(work({ transformationType: 'scd_type_2' }), ctx), {
    message: 'streamingTarget.transformationType is scd_type_2; this agent knows copy_table, copy_table_soft_delete, change_log',
  });
  await assert.rejects(startStreamingPipeline(work({ temporalMapping: 'julian' }), ctx), {
    message: 'streamingTarget.temporalMapping is julian; this agent knows native, epoch',
  });
});

test("MariaDB to warehouse tables: the binlog's inserts, updates, deletes, a new column and a truncate reach the change table and the applied copy", async () => {
  const mariadb = await startPrivateMariadb(['--log-bin=binlog', '--binlog-format=ROW']);
  const root = await mariadb.root();
  try {
    await root.query('CREATE DATABASE shop');
    await root.query('CREATE TABLE shop.orders (id int PRIMARY KEY, item varchar(50) NOT NULL, placed datetime NULL)');
    await root.query("INSERT INTO shop.orders VALUES (1, 'apple', '2026-01-02 03:04:05'), (2, 'bread', NULL)");
    const warehouse = await duckdb('mariadb');
    const pipelineId = '6f1c2b3a-0000-4000-8000-0000000000b1';
    const connection = { host: mariadb.host, port: mariadb.port, user: mariadb.user, password: mariadb.password };
    const stop = new AbortController();
    const progress: StreamingProgress[] = [];
    const running = runMysqlPipeline({
      pipelineId,
      tables: [{ schema: 'shop', table: 'orders' }],
      advancedProperties: {},
      stateDir: path.join(dir, 'state'),
      connection,
      target: new WarehouseTarget({
        warehouse,
        pipelineId,
        schema: 'cdc',
        tablePrefixType: 'source_database_and_schema',
        transformationType: 'copy_table',
        temporalMapping: 'native',
        catalog: { describe: (table) => describeMysqlTable(connection, table) },
      }),
      signal: stop.signal,
      report: (report) => progress.push(report),
      log: () => undefined,
      batchChanges: 1,
    });
    await until('it streams', () => progress.some((report) => report.phase === 'streaming'));
    await root.query("INSERT INTO shop.orders VALUES (3, 'cheese', NULL)");
    await root.query("UPDATE shop.orders SET item = 'apples' WHERE id = 1");
    await root.query('DELETE FROM shop.orders WHERE id = 2');
    await root.query('ALTER TABLE shop.orders ADD COLUMN note varchar(50) NULL');
    await root.query("INSERT INTO shop.orders VALUES (4, 'fig', NULL, 'a new column')");
    const changes = async () => rows(warehouse, 'SELECT * FROM cdc.shop_orders_changes ORDER BY _dpc_position_key, _dpc_seq');
    await until('every change is in the change table', async () => (await changes()).length >= 6);
    assert.deepEqual(
      (await changes()).map((row) => [row._dpc_op, row.id]),
      [
        ['snapshot', 1],
        ['snapshot', 2],
        ['insert', 3],
        ['update', 1],
        ['delete', 2],
        ['insert', 4],
      ],
    );
    assert.deepEqual(
      (await rows(warehouse, 'SELECT id, item, note FROM cdc.shop_orders ORDER BY id')).map((row) => [
        row.id,
        row.item,
        row.note,
      ]),
      [
        [1, 'apples', null],
        [3, 'cheese', null],
        [4, 'fig', 'a new column'],
      ],
    );
    await root.query('TRUNCATE shop.orders');
    await until(
      'the truncate empties the applied copy',
      async () => (await rows(warehouse, 'SELECT * FROM cdc.shop_orders')).length === 0,
    );
    stop.abort();
    const end = await running;
    assert.deepEqual(end.rowsPerTable, { 'shop.orders': 7 });
  } finally {
    await root.end().catch(() => undefined);
    await mariadb.stop();
  }
});
