import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import type mysql from 'mysql2/promise';
import { startPrivateMariadb, type PrivateMariadb } from '../helpers/private-mariadb.ts';
import { folderEvents, sourceDefinition, StreamingRig, tempDir } from '../helpers/streaming.ts';

/**
 * A MySQL/MariaDB source: the binary log in row format, read by the reference agent (a real process) into
 * the folder target. MariaDB servers of the test's own (one with binlog_format=ROW, one with MIXED). What
 * reaches the folder does not depend on the server's store, so this runs on SQLite only.
 */

let rig: StreamingRig;
let source: PrivateMariadb;
let mixed: PrivateMariadb;
let sql: mysql.Connection;
let lakeDir: string;

const eventsOf = (table: string) => folderEvents(path.join(lakeDir, 'lake', 'cdc', 'shop', table));

function definition(name: string, server: PrivateMariadb, secretName: string) {
  return {
    name,
    streamingSource: sourceDefinition(server, ['shop.orders'], { type: 'mysql', database: false, secretName }),
    streamingTarget: { type: 's3', bucket: 'lake', prefix: 'cdc' },
  };
}

before(async () => {
  [source, mixed] = await Promise.all([
    startPrivateMariadb(['--log-bin=binlog', '--binlog-format=ROW']),
    startPrivateMariadb(['--log-bin=binlog', '--binlog-format=MIXED']),
  ]);
  sql = await source.root();
  await sql.query('CREATE DATABASE shop');
  await sql.query('CREATE TABLE shop.orders (id int PRIMARY KEY, item varchar(50) NOT NULL, qty int NOT NULL)');
  await sql.query("INSERT INTO shop.orders VALUES (1, 'apple', 1), (2, 'bread', 2)");
  const other = await mixed.root();
  await other.query('CREATE DATABASE shop');
  await other.query('CREATE TABLE shop.orders (id int PRIMARY KEY)');
  await other.end();
  lakeDir = tempDir('dpc-lake-mysql-');
  rig = await StreamingRig.start({
    agentEnv: { DPC_AGENT_OBJECT_STORE: pathToFileURL(lakeDir).href },
    secrets: { 'shop-db': source.password, 'mixed-db': mixed.password },
    stateDirPrefix: 'dpc-agent-mysql-',
  });
});

after(async () => {
  await rig?.close();
  await sql?.end().catch(() => undefined);
  await source?.stop();
  await mixed?.stop();
  if (lakeDir) rmSync(lakeDir, { recursive: true, force: true });
});

test('MariaDB binlog: snapshot, insert, update, delete, a new column, truncate; a kill -9 and a restart lose and double nothing', async () => {
  const id = await rig.createPipeline(definition('shop-cdc', source, 'shop-db'));
  await rig.startStreaming(id);
  await sql.query("INSERT INTO shop.orders VALUES (3, 'cheese', 3)");
  await sql.query('UPDATE shop.orders SET qty = 10 WHERE id = 1');
  await sql.query('DELETE FROM shop.orders WHERE id = 2');
  await sql.query('ALTER TABLE shop.orders ADD COLUMN note varchar(50)');
  await sql.query("INSERT INTO shop.orders VALUES (4, 'fig', 4, 'after the new column')");
  await sql.query('TRUNCATE TABLE shop.orders');
  const events = await rig.until('every change is in the folder', async () => {
    const all = eventsOf('orders');
    return all.length >= 7 && all;
  });
  assert.deepEqual(
    events.map((event) => [event.op, event.before, event.after]),
    [
      ['snapshot', null, { id: 1, item: 'apple', qty: 1 }],
      ['snapshot', null, { id: 2, item: 'bread', qty: 2 }],
      ['insert', null, { id: 3, item: 'cheese', qty: 3 }],
      ['update', { id: 1, item: 'apple', qty: 1 }, { id: 1, item: 'apple', qty: 10 }],
      ['delete', { id: 2, item: 'bread', qty: 2 }, null],
      ['insert', null, { id: 4, item: 'fig', qty: 4, note: 'after the new column' }],
      ['truncate', null, null],
    ],
  );
  for (const event of events.slice(2)) {
    assert.match(event.commitLsn, /^binlog\.\d+:\d+$/);
    assert.ok(!Number.isNaN(Date.parse(event.commitTime)));
  }

  const writer = (async () => {
    const client = await source.root();
    for (let t = 0; t < 100; t += 1) {
      const values = Array.from({ length: 5 }, (_, i) => `(${100 + t * 5 + i}, 'item', 1, NULL)`);
      await client.query(`INSERT INTO shop.orders VALUES ${values.join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await client.end();
  })();
  await rig.until('some rows arrive', async () => eventsOf('orders').length >= 7 + 50);
  await rig.killAgent();
  await writer;
  await rig.startAgent();
  await rig.until(
    'every row is in the folder',
    async () => eventsOf('orders').length >= 507 && (await rig.status(id)).rowsPerTable?.['shop.orders'] === 507,
    60_000,
  );
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const ids = eventsOf('orders')
    .slice(7)
    .map((event) => event.after?.id);
  assert.deepEqual(
    ids,
    Array.from({ length: 500 }, (_, i) => 100 + i),
    'each change once, in order',
  );
  const shown = await rig.status(id);
  assert.equal(shown.status, 'RUNNING');
  assert.match(shown.position, /^binlog\.\d+:\d+$/);
});

test('a MariaDB source whose binlog_format is not ROW fails start naming binlog_format', async () => {
  const id = await rig.createPipeline(definition('mixed-cdc', mixed, 'mixed-db'));
  await rig.command(id, 'START');
  const failed = await rig.until('the start fails', async () => {
    const current = await rig.status(id);
    return current.status === 'FAILED' && current;
  });
  assert.equal(failed.message, "the source's binlog_format is MIXED; change data capture needs binlog_format=ROW");
});
