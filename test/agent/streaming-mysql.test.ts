import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import type mysql from 'mysql2/promise';
import { TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { startPrivateMariadb, type PrivateMariadb } from '../helpers/private-mariadb.ts';

/**
 * A MySQL/MariaDB source: the binary log in row format, read by the reference agent (a real process) into
 * the folder target. MariaDB servers of the test's own (one with binlog_format=ROW, one with MIXED). What
 * reaches the folder does not depend on the server's store, so this runs on SQLite only.
 */

interface ChangeEvent {
  op: string;
  schema: string;
  table: string;
  lsn: string;
  commitLsn: string;
  commitTime: string;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

let server: TestServer;
let caller: Caller;
let projectId: string;
let agentId: string;
let source: PrivateMariadb;
let mixed: PrivateMariadb;
let sql: mysql.Connection;
let stateDir: string;
let lakeDir: string;
let credentials: { clientId: string; clientSecret: string };
let agent: Awaited<ReturnType<typeof spawnAgent>> | undefined;

const api = (method: string, apiPath: string, body?: unknown) => server.api(method, apiPath, { token: caller.token, body });

async function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await check();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.fail(`timed out waiting until ${what}; the agent's last lines:\n${agent?.logs().split('\n').slice(-15).join('\n')}`);
}

const startAgent = async () => {
  agent = await spawnAgent(
    { url: server.url, ...credentials, stateDir },
    { DPC_AGENT_OBJECT_STORE: pathToFileURL(lakeDir).href },
  );
};

function eventsOf(table: string): ChangeEvent[] {
  const folder = path.join(lakeDir, 'lake', 'cdc', 'shop', table);
  if (!existsSync(folder)) return [];
  return readdirSync(folder)
    .filter((name) => name.endsWith('.jsonl'))
    .sort()
    .flatMap((name) =>
      readFileSync(path.join(folder, name), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as ChangeEvent),
    );
}

function definition(name: string, server: PrivateMariadb, secretName: string) {
  return {
    name,
    agentId,
    streamingSource: {
      type: 'mysql',
      connection: {
        host: server.host,
        port: server.port,
        username: server.user,
        password: { secretName, secretKey: 'password' },
      },
      tables: [{ schema: 'shop', table: 'orders' }],
    },
    streamingTarget: { type: 's3', bucket: 'lake', prefix: 'cdc' },
  };
}

const statusOf = async (id: string) => (await api('GET', `/projects/${projectId}/streaming-pipelines/${id}/status`)).body;

before(async () => {
  server = await TestServer.start('sqlite', { agentConnectedWindowSeconds: 6, agentWorkLeaseSeconds: 5 });
  ({ caller, projectId } = await server.prologue());
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
  stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-mysql-'));
  lakeDir = mkdtempSync(path.join(tmpdir(), 'dpc-lake-mysql-'));
  agentId = (await api('POST', '/agents', { name: 'cdc', agentType: 'streaming', cloudProvider: 'aws', deployment: 'fargate' }))
    .body.agentId;
  credentials = (await api('POST', `/agents/${agentId}/credentials`)).body;
  await startAgent();
  await until('the agent is connected', async () => (await api('GET', `/agents/${agentId}`)).body.connected);
  for (const [name, value] of [
    ['shop-db', source.password],
    ['mixed-db', mixed.password],
  ] as const) {
    const written = await api('POST', `/secrets/${agentId}/secret-value`, {
      secret: { name, key: 'password', type: 'PASSWORD', value },
    });
    assert.equal(written.status, 200, written.text);
  }
});

after(async () => {
  agent?.child.kill('SIGKILL');
  await agent?.exited;
  await sql?.end().catch(() => undefined);
  await source?.stop();
  await mixed?.stop();
  await server?.close();
  for (const dir of [stateDir, lakeDir]) if (dir) rmSync(dir, { recursive: true, force: true });
});

test('MariaDB binlog: snapshot, insert, update, delete, a new column, truncate; a kill -9 and a restart lose and double nothing', async () => {
  const created = await api('POST', `/projects/${projectId}/streaming-pipelines`, definition('shop-cdc', source, 'shop-db'));
  assert.equal(created.status, 201, created.text);
  const id = created.body.streamingPipelineId;
  assert.equal(
    (await api('POST', `/projects/${projectId}/streaming-pipelines/${id}/commands`, { command: 'START' })).status,
    202,
  );
  await until('the pipeline streams', async () => {
    const current = await statusOf(id);
    assert.notEqual(current.status, 'FAILED', current.message);
    return current.status === 'RUNNING' && current.phase === 'streaming';
  });
  await sql.query("INSERT INTO shop.orders VALUES (3, 'cheese', 3)");
  await sql.query('UPDATE shop.orders SET qty = 10 WHERE id = 1');
  await sql.query('DELETE FROM shop.orders WHERE id = 2');
  await sql.query('ALTER TABLE shop.orders ADD COLUMN note varchar(50)');
  await sql.query("INSERT INTO shop.orders VALUES (4, 'fig', 4, 'after the new column')");
  await sql.query('TRUNCATE TABLE shop.orders');
  const events = await until('every change is in the folder', async () => {
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
  await until('some rows arrive', async () => eventsOf('orders').length >= 7 + 50);
  agent!.child.kill('SIGKILL');
  await agent!.exited;
  await writer;
  await startAgent();
  await until(
    'every row is in the folder',
    async () => eventsOf('orders').length >= 507 && (await statusOf(id)).rowsPerTable?.['shop.orders'] === 507,
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
  const shown = await statusOf(id);
  assert.equal(shown.status, 'RUNNING');
  assert.match(shown.position, /^binlog\.\d+:\d+$/);
});

test('a MariaDB source whose binlog_format is not ROW fails start naming binlog_format', async () => {
  const created = await api('POST', `/projects/${projectId}/streaming-pipelines`, definition('mixed-cdc', mixed, 'mixed-db'));
  assert.equal(created.status, 201, created.text);
  const id = created.body.streamingPipelineId;
  await api('POST', `/projects/${projectId}/streaming-pipelines/${id}/commands`, { command: 'START' });
  const failed = await until('the start fails', async () => {
    const current = await statusOf(id);
    return current.status === 'FAILED' && current;
  });
  assert.equal(failed.message, "the source's binlog_format is MIXED; change data capture needs binlog_format=ROW");
});
