import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { environmentSchema } from '../../src/agent/warehouse/roles.ts';
import { describeEachStore } from '../helpers/harness.ts';
import {
  snowflakeTarget,
  sourceDefinition,
  STAND_IN_PRIVATE_KEY,
  startLogicalSource,
  StreamingRig,
  warehouseBeside,
  writeInBackground,
  type LogicalSource,
} from '../helpers/streaming.ts';

/**
 * A `snowflake` target, end to end with real processes: a server, the reference agent as a child process
 * whose warehouse is PostgreSQL (DPC_AGENT_WAREHOUSE_URL, what its pipelines run on when their environment
 * names none), and a PostgreSQL source cluster of the test's own with wal_level=logical. Per source table
 * the warehouse gets a change table and an applied copy; a kill -9 mid-stream and a restart leave each
 * change in both once.
 */

describeEachStore(
  'streaming pipelines into warehouse tables: PostgreSQL to the agent warehouse, through a real agent',
  (kind) => {
    let rig: StreamingRig;
    let source: LogicalSource;
    let sql: pg.Client;
    let warehouse: pg.Client;
    let pipelineId: string;

    const status = (id = pipelineId) => rig.status(id);

    const rows = async (query: string) => {
      try {
        return (await warehouse.query(query)).rows;
      } catch (error) {
        if ((error as { code?: string }).code === '42P01') return []; // not made yet
        throw error;
      }
    };

    before(async () => {
      source = await startLogicalSource([
        'CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL, qty integer NOT NULL, placed timestamptz)',
        'CREATE TABLE notes (id integer PRIMARY KEY, body text)',
        "INSERT INTO orders VALUES (1, 'apple', 1, '2026-03-01T10:00:00Z'), (2, 'bread', 2, NULL), (3, 'cheese', 3, NULL)",
      ]);
      sql = source.sql;
      let warehouseUrl: string;
      ({ url: warehouseUrl, client: warehouse } = await warehouseBeside(source));
      rig = await StreamingRig.start({
        kind,
        agentEnv: { DPC_AGENT_WAREHOUSE_URL: warehouseUrl },
        secrets: {
          'cdc-source': source.cluster.password,
          'snowflake-key': STAND_IN_PRIVATE_KEY,
        },
        stateDirPrefix: 'dpc-agent-cdc-wh-',
      });
    });

    after(async () => {
      await rig?.close();
      await warehouse?.end().catch(() => undefined);
      await source?.stop();
    });

    test('snapshot, insert, update, delete, a new column and truncate reach a change table and an applied copy', async () => {
      pipelineId = await rig.createPipeline({
        name: 'orders-to-warehouse',
        advancedProperties: { 'snapshot.mode': 'initial' },
        streamingSource: sourceDefinition(source.cluster, ['orders', 'notes']),
        streamingTarget: snowflakeTarget('raw_cdc'),
      });
      await rig.startStreaming(pipelineId);
      assert.deepEqual(
        (await rows('SELECT id, item, qty, placed FROM raw_cdc.orders ORDER BY id')).map((row) => [
          row.id,
          row.item,
          row.qty,
          row.placed?.toISOString() ?? null,
        ]),
        [
          [1, 'apple', 1, '2026-03-01T10:00:00.000Z'],
          [2, 'bread', 2, null],
          [3, 'cheese', 3, null],
        ],
      );

      await sql.query("INSERT INTO orders VALUES (4, 'pear', 4, NULL)");
      await sql.query('UPDATE orders SET qty = 10 WHERE id = 1');
      await sql.query('DELETE FROM orders WHERE id = 2');
      await sql.query('ALTER TABLE orders ADD COLUMN note text');
      await sql.query("INSERT INTO orders VALUES (5, 'fig', 5, NULL, 'added after the new column')");
      const changes = () => rows('SELECT * FROM raw_cdc.orders_changes ORDER BY _dpc_position_key, _dpc_seq');
      await rig.until('every change is in the change table', async () => (await changes()).length >= 7);
      const all = await changes();
      assert.deepEqual(
        all.map((row) => [row._dpc_op, row.id]),
        [
          ['snapshot', 1],
          ['snapshot', 2],
          ['snapshot', 3],
          ['insert', 4],
          ['update', 1],
          ['delete', 2],
          ['insert', 5],
        ],
      );
      assert.equal(all[6].note, 'added after the new column');
      assert.deepEqual(
        (await rows('SELECT id, qty, note FROM raw_cdc.orders ORDER BY id')).map((row) => [row.id, row.qty, row.note]),
        [
          [1, 10, null],
          [3, 3, null],
          [4, 4, null],
          [5, 5, 'added after the new column'],
        ],
      );
      const shown = await rig.until('the status shows the last position', async () => {
        const current = await status();
        return current.position === all[6]._dpc_position && current;
      });
      assert.deepEqual(shown.rowsPerTable, { 'public.orders': 7 });

      await sql.query('TRUNCATE orders');
      await rig.until(
        'the truncate empties the applied copy',
        async () => (await rows('SELECT * FROM raw_cdc.orders')).length === 0,
      );
      assert.equal((await changes()).at(-1)._dpc_op, 'truncate');
    });

    test('a kill -9 of the agent mid-stream: once restarted it resumes, each change once in the change table and the applied copy', async () => {
      const transactions = 300;
      const perTransaction = 5;
      /** Transaction t's rows: ids from t * perTransaction + 1 on. */
      const notesOf = (t: number) =>
        Array.from({ length: perTransaction }, (_, i) => `(${t * perTransaction + i + 1}, 'note ${t}')`).join(', ');
      const writer = writeInBackground(source.cluster.url, transactions, (t) => [
        `INSERT INTO notes VALUES ${notesOf(t)}`,
        ...(t % 50 === 49 ? [`UPDATE notes SET body = 'updated' WHERE id = ${t * perTransaction}`] : []),
      ]);
      const count = async (table: string) => Number((await rows(`SELECT count(*) AS n FROM raw_cdc.${table}`))[0]?.n ?? 0);
      await rig.until('some notes are in the warehouse', async () => (await count('notes_changes')) >= 100);
      await rig.killAgent();
      const atKill = await count('notes_changes');
      await writer;
      const total = transactions * perTransaction;
      const updates = transactions / 50;
      assert.ok(atKill < total, `killed mid-stream (${atKill} written)`);
      await rig.startAgent();
      await rig.until('every note is in the warehouse', async () => (await count('notes_changes')) >= total + updates, 60_000);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const logged = await rows("SELECT id, count(*) AS n FROM raw_cdc.notes_changes WHERE _dpc_op = 'insert' GROUP BY id");
      assert.equal(logged.length, total, 'no insert lost');
      assert.ok(
        logged.every((row) => Number(row.n) === 1),
        'no insert twice',
      );
      assert.equal(await count('notes_changes'), total + updates, 'no change twice');
      assert.equal(await count('notes'), total, 'the applied copy has every row once');
      assert.equal(Number((await rows("SELECT count(*) AS n FROM raw_cdc.notes WHERE body = 'updated'"))[0].n), updates);
      const shown = await rig.until('the status counts every change', async () => {
        const current = await status();
        return current.rowsPerTable?.['public.notes'] === total + updates && current;
      });
      assert.equal(shown.status, 'RUNNING');
    });

    test('an agent whose warehouse roles own only their schema (DPC_AGENT_WAREHOUSE_ROLE_KEY) writes there, and names the refusal elsewhere', async () => {
      await rig.stop(pipelineId);
      await rig.killAgent();
      await rig.startAgent({ DPC_AGENT_WAREHOUSE_ROLE_KEY: Buffer.from('a role key for the test only').toString('base64') });
      const own = environmentSchema(rig.caller.accountId, 'default');
      const definition = (name: string, tableSchema: string) => ({
        name,
        advancedProperties: { 'snapshot.mode': 'initial' },
        streamingSource: sourceDefinition(source.cluster, ['notes']),
        streamingTarget: snowflakeTarget(tableSchema),
      });
      const elsewhere = await rig.createPipeline(definition('notes-elsewhere', 'not_its_schema'));
      await rig.command(elsewhere, 'START');
      const refused = await rig.until('the start elsewhere fails', async () => {
        const current = await status(elsewhere);
        return current.status === 'FAILED' && current;
      });
      assert.match(refused.message, /permission denied/);

      const created = await rig.createPipeline(definition('notes-own-schema', own));
      await rig.startStreaming(created);
      await sql.query("INSERT INTO notes VALUES (100000, 'into the role schema')");
      await rig.until(
        "the change is in the role's schema",
        async () => (await rows(`SELECT body FROM ${own}.notes WHERE id = 100000`)).length === 1,
      );
      const owner = await rows(`SELECT tableowner FROM pg_tables WHERE schemaname = '${own}' AND tablename = 'notes_changes'`);
      assert.equal(owner[0]?.tableowner, own, "the tables belong to the environment's role");
      await rig.stop(created);
    });
  },
);
