import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore } from '../helpers/harness.ts';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';
import {
  folderEvents,
  sourceDefinition,
  startLogicalSource,
  StreamingRig,
  tempDir,
  writeInBackground,
  type LogicalSource,
} from '../helpers/streaming.ts';

/**
 * Streaming pipelines move data, end to end with real processes: a server, the reference agent as a child
 * process, and PostgreSQL clusters of the test's own (one with wal_level=logical, one without). Changes go
 * to the agent's object store folder (an `s3` target served by `--object-store file://...`).
 */

const LSN = /^[0-9A-F]{1,8}\/[0-9A-F]{1,8}$/;
const lsnValue = (lsn: string) => {
  const [high, low] = lsn.split('/');
  return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`);
};

describeEachStore('streaming pipelines move data: PostgreSQL to a folder, through a real agent', (kind) => {
  let rig: StreamingRig;
  let source: LogicalSource;
  let sql: pg.Client;
  let plain: PrivatePostgres;
  let lakeDir: string;
  let pipelineId: string;

  const status = (id = pipelineId) => rig.status(id);

  /** Every event the target holds for a table, files in name order (the snapshot first, then by LSN), lines in order. */
  const eventsOf = (table: string) => folderEvents(path.join(lakeDir, 'lake', 'cdc', 'public', table));

  function definition(name: string, cluster: PrivatePostgres, type = 'postgres', tables = ['orders', 'notes']) {
    return {
      name,
      advancedProperties: { 'snapshot.mode': 'initial' },
      streamingSource: sourceDefinition(cluster, tables, { type, database: type !== 'db2ibmi' && 'postgres' }),
      streamingTarget: { type: 's3', bucket: 'lake', prefix: 'cdc/' },
    };
  }

  before(async () => {
    source = await startLogicalSource([
      'CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL, qty integer NOT NULL)',
      'CREATE TABLE notes (id integer PRIMARY KEY, body text)',
      "INSERT INTO orders VALUES (1, 'apple', 1), (2, 'bread', 2), (3, 'cheese', 3)",
    ]);
    sql = source.sql;
    plain = await startPrivatePostgres({ wal_level: 'replica' });
    lakeDir = tempDir('dpc-lake-');
    // The source's password goes to the agent's vault only; the definition refers to it.
    rig = await StreamingRig.start({
      kind,
      agentEnv: { DPC_AGENT_OBJECT_STORE: pathToFileURL(lakeDir).href },
      secrets: { 'cdc-source': source.cluster.password },
      stateDirPrefix: 'dpc-agent-cdc-',
    });
  });

  after(async () => {
    await rig?.close();
    await source?.stop();
    await plain?.stop();
    if (lakeDir) rmSync(lakeDir, { recursive: true, force: true });
  });

  test('snapshot, insert, update, delete, a new column and truncate reach the folder; the status shows position, lag and rows', async () => {
    pipelineId = await rig.createPipeline(definition('orders-cdc', source.cluster));
    await rig.startStreaming(pipelineId);
    const snapshot = eventsOf('orders');
    assert.deepEqual(
      snapshot.map((event) => [event.op, event.after]),
      [
        ['snapshot', { id: 1, item: 'apple', qty: 1 }],
        ['snapshot', { id: 2, item: 'bread', qty: 2 }],
        ['snapshot', { id: 3, item: 'cheese', qty: 3 }],
      ],
    );

    await sql.query("INSERT INTO orders VALUES (4, 'pear', 4)");
    await sql.query('UPDATE orders SET qty = 10 WHERE id = 1');
    await sql.query('DELETE FROM orders WHERE id = 2');
    await sql.query('ALTER TABLE orders ADD COLUMN note text');
    await sql.query("INSERT INTO orders VALUES (5, 'fig', 5, 'added after the new column')");
    await sql.query('TRUNCATE orders');
    const events = await rig.until('every change is in the folder', async () => {
      const all = eventsOf('orders');
      return all.length >= 8 && all;
    });
    assert.deepEqual(
      events.map((event) => event.op),
      ['snapshot', 'snapshot', 'snapshot', 'insert', 'update', 'delete', 'insert', 'truncate'],
    );
    const [insert, update, remove, afterColumn, truncate] = events.slice(3);
    assert.deepEqual(insert!.after, { id: 4, item: 'pear', qty: 4 });
    assert.equal(insert!.before, null);
    assert.deepEqual(update!.after, { id: 1, item: 'apple', qty: 10 });
    assert.equal(remove!.after, null);
    assert.equal(remove!.before?.id, 2, 'a delete carries the key of the row');
    assert.deepEqual(afterColumn!.after, { id: 5, item: 'fig', qty: 5, note: 'added after the new column' });
    assert.equal(truncate!.after, null);
    for (const event of events) {
      assert.equal(event.schema, 'public');
      assert.equal(event.table, 'orders');
      assert.match(event.lsn, LSN);
      assert.match(event.commitLsn, LSN);
      assert.ok(!Number.isNaN(Date.parse(event.commitTime)), event.commitTime);
    }
    for (const [earlier, later] of events
      .slice(3)
      .map((event, i, all) => [event, all[i + 1]] as const)
      .slice(0, -1)) {
      assert.ok(lsnValue(earlier.commitLsn) < lsnValue(later!.commitLsn), 'one transaction each, in commit order');
      assert.equal(typeof earlier.xid, 'number');
    }

    const shown = await rig.until('the status shows the last position', async () => {
      const current = await status();
      return current.position === truncate!.commitLsn && current;
    });
    assert.equal(shown.status, 'RUNNING');
    assert.deepEqual(shown.rowsPerTable, { 'public.orders': 8 });
    assert.equal(typeof shown.lagSeconds, 'number');
    assert.ok(shown.lagSeconds >= 0 && shown.lagSeconds < 30, String(shown.lagSeconds));
    assert.ok(!Number.isNaN(Date.parse(shown.reportedAt)));
  });

  test('a kill -9 of the agent mid-stream: once restarted it resumes, no change lost and none twice at the target', async () => {
    const transactions = 300;
    const perTransaction = 5;
    /** Transaction t's rows: ids from t * perTransaction + 1 on. */
    const notesOf = (t: number) =>
      Array.from({ length: perTransaction }, (_, i) => `(${t * perTransaction + i + 1}, 'note ${t}')`).join(', ');
    const writer = writeInBackground(source.cluster.url, transactions, (t) => [`INSERT INTO notes VALUES ${notesOf(t)}`]);
    await rig.until('some notes are in the folder', async () => eventsOf('notes').length >= 100);
    await rig.killAgent();
    const atKill = eventsOf('notes').length;
    await writer;
    assert.ok(atKill < transactions * perTransaction, `killed mid-stream (${atKill} written)`);
    await rig.startAgent();
    const total = transactions * perTransaction;
    await rig.until(
      'every note is in the folder',
      async () => eventsOf('notes').length >= total && (await status()).rowsPerTable?.['public.notes'] === total,
      60_000,
    );
    // Another moment: nothing more arrives.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const notes = eventsOf('notes');
    const ids = notes.map((event) => event.after?.id as number);
    assert.equal(notes.length, total, 'no change twice');
    assert.equal(new Set(ids).size, total, 'no id twice');
    assert.deepEqual(
      [...ids].sort((a, b) => a - b),
      Array.from({ length: total }, (_, i) => i + 1),
      'no change lost',
    );
    assert.ok(notes.every((event) => event.op === 'insert'));
    assert.equal(eventsOf('orders').length, 8, 'resumed from its position: no second snapshot');
    const shown = await status();
    assert.equal(shown.status, 'RUNNING');
    assert.deepEqual(shown.rowsPerTable, { 'public.orders': 8, 'public.notes': total });
  });

  test('stop keeps the slot: a change made while stopped arrives on the next start; DELETE ?dropSlot=true drops slot and publication', async () => {
    await rig.stop(pipelineId);
    const slot = `dpc_${pipelineId.replaceAll('-', '')}`;
    const slots = async () =>
      (await sql.query('SELECT slot_name FROM pg_replication_slots WHERE slot_name = $1', [slot])).rowCount;
    assert.equal(await slots(), 1, 'stop keeps the slot');
    await sql.query("INSERT INTO orders VALUES (6, 'grape', 6, 'while stopped')");
    await rig.command(pipelineId, 'START');
    const arrived = await rig.until('the change made while stopped arrives', async () => {
      const all = eventsOf('orders');
      return all.length >= 9 && all;
    });
    assert.deepEqual(arrived.at(-1)!.after, { id: 6, item: 'grape', qty: 6, note: 'while stopped' });
    assert.equal(arrived.length, 9);
    await rig.untilStatus(pipelineId, 'RUNNING');
    await rig.stop(pipelineId);

    const deleted = await rig.api('DELETE', `${rig.pipelines(pipelineId)}?dropSlot=true`);
    assert.equal(deleted.status, 204, deleted.text);
    await rig.until('the agent dropped the slot', async () => (await slots()) === 0);
    await rig.until(
      'and the publication',
      async () => (await sql.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [slot])).rowCount === 0,
    );
    assert.equal((await rig.api('GET', rig.pipelines(pipelineId))).status, 404);
  });

  test('a source without wal_level=logical fails start naming wal_level; sqlserver, oracle and db2ibmi are not supported by this agent', async () => {
    const plainSql = new pg.Client(plain.url);
    await plainSql.connect();
    await plainSql.query('CREATE TABLE orders (id integer PRIMARY KEY)');
    await plainSql.end();
    await rig.writeSecrets({ 'cdc-plain': plain.password });
    const body = definition('replica-only', plain, 'postgres', ['orders']);
    body.streamingSource.connection.password.secretName = 'cdc-plain';
    const created = await rig.createPipeline(body);
    await rig.command(created, 'START');
    const failed = await rig.until('the start fails', async () => {
      const current = await status(created);
      return current.status === 'FAILED' && current;
    });
    assert.match(failed.message, /wal_level is replica; change data capture needs wal_level=logical/);

    for (const type of ['sqlserver', 'oracle', 'db2ibmi']) {
      const other = await rig.createPipeline(definition(`from-${type}`, source.cluster, type, ['orders']));
      await rig.command(other, 'START');
      const refused = await rig.until(`the ${type} start fails`, async () => {
        const current = await status(other);
        return current.status === 'FAILED' && current;
      });
      assert.equal(refused.message, `source type ${type} is not supported by this agent`);
    }
  });
});
