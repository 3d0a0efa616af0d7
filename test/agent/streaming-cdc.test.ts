import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';

/**
 * Streaming pipelines move data, end to end with real processes: a server, the reference agent as a child
 * process, and PostgreSQL clusters of the test's own (one with wal_level=logical, one without). Changes go
 * to the agent's object store folder (an `s3` target served by `--object-store file://...`).
 */

interface ChangeEvent {
  op: string;
  schema: string;
  table: string;
  lsn: string;
  commitLsn: string;
  commitTime: string;
  xid: number | null;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
}

const LSN = /^[0-9A-F]{1,8}\/[0-9A-F]{1,8}$/;
const lsnValue = (lsn: string) => {
  const [high, low] = lsn.split('/');
  return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`);
};

describeEachStore('streaming pipelines move data: PostgreSQL to a folder, through a real agent', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let source: PrivatePostgres;
  let plain: PrivatePostgres;
  let sql: pg.Client;
  let stateDir: string;
  let lakeDir: string;
  let agentId: string;
  let credentials: { clientId: string; clientSecret: string };
  let agent: Awaited<ReturnType<typeof spawnAgent>> | undefined;
  let pipelineId: string;

  const api = (method: string, apiPath: string, body?: unknown) => server.api(method, apiPath, { token: caller.token, body });
  const pipelines = () => `/projects/${projectId}/streaming-pipelines`;
  const status = async (id = pipelineId) => (await api('GET', `${pipelines()}/${id}/status`)).body;

  async function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    let last: unknown;
    while (Date.now() < deadline) {
      const value = await check();
      if (value) return value;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    last = agent?.logs().split('\n').slice(-15).join('\n');
    assert.fail(`timed out waiting until ${what}; the agent's last lines:\n${last}`);
  }

  const startAgent = async () => {
    agent = await spawnAgent(
      { url: server.url, ...credentials, stateDir },
      { DPC_AGENT_OBJECT_STORE: pathToFileURL(lakeDir).href },
    );
  };

  /** Every event the target holds for a table, files in name order (the snapshot first, then by LSN), lines in order. */
  function eventsOf(table: string): ChangeEvent[] {
    const folder = path.join(lakeDir, 'lake', 'cdc', 'public', table);
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

  function definition(name: string, cluster: PrivatePostgres, type = 'postgres', tables = ['orders', 'notes']) {
    return {
      name,
      agentId,
      advancedProperties: { 'snapshot.mode': 'initial' },
      streamingSource: {
        type,
        connection: {
          host: cluster.host,
          port: cluster.port,
          ...(type !== 'db2ibmi' && { database: 'postgres' }),
          username: cluster.user,
          password: { secretName: 'cdc-source', secretKey: 'password', secretType: 'PASSWORD' },
        },
        tables: tables.map((table) => ({ schema: 'public', table })),
      },
      streamingTarget: { type: 's3', bucket: 'lake', prefix: 'cdc/' },
    };
  }

  async function command(id: string, verb: 'START' | 'STOP') {
    const answer = await api('POST', `${pipelines()}/${id}/commands`, { command: verb });
    assert.equal(answer.status, 202, answer.text);
  }

  before(async () => {
    server = await TestServer.start(kind, { agentConnectedWindowSeconds: 6, agentWorkLeaseSeconds: 5 });
    ({ caller, projectId } = await server.prologue());
    source = await startPrivatePostgres({ wal_level: 'logical' });
    plain = await startPrivatePostgres({ wal_level: 'replica' });
    sql = new pg.Client(source.url);
    await sql.connect();
    await sql.query('CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL, qty integer NOT NULL)');
    await sql.query('CREATE TABLE notes (id integer PRIMARY KEY, body text)');
    await sql.query("INSERT INTO orders VALUES (1, 'apple', 1), (2, 'bread', 2), (3, 'cheese', 3)");
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-cdc-'));
    lakeDir = mkdtempSync(path.join(tmpdir(), 'dpc-lake-'));
    agentId = (await api('POST', '/agents', { name: 'cdc', agentType: 'streaming', cloudProvider: 'aws', deployment: 'fargate' }))
      .body.agentId;
    credentials = (await api('POST', `/agents/${agentId}/credentials`)).body;
    await startAgent();
    await until('the agent is connected', async () => (await api('GET', `/agents/${agentId}`)).body.connected);
    // The source's password goes to the agent's vault only; the definition refers to it.
    const written = await api('POST', `/secrets/${agentId}/secret-value`, {
      secret: { name: 'cdc-source', key: 'password', type: 'PASSWORD', value: source.password },
    });
    assert.equal(written.status, 200, written.text);
  });

  after(async () => {
    agent?.child.kill('SIGKILL');
    await agent?.exited;
    await sql?.end().catch(() => undefined);
    await source?.stop();
    await plain?.stop();
    await server?.close();
    for (const dir of [stateDir, lakeDir]) if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('snapshot, insert, update, delete, a new column and truncate reach the folder; the status shows position, lag and rows', async () => {
    const created = await api('POST', pipelines(), definition('orders-cdc', source));
    assert.equal(created.status, 201, created.text);
    pipelineId = created.body.streamingPipelineId;
    await command(pipelineId, 'START');
    await until('the pipeline streams', async () => {
      const current = await status();
      assert.notEqual(current.status, 'FAILED', current.message);
      return current.status === 'RUNNING' && current.phase === 'streaming';
    });
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
    const events = await until('every change is in the folder', async () => {
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

    const shown = await until('the status shows the last position', async () => {
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
    const writer = (async () => {
      const client = new pg.Client(source.url);
      await client.connect();
      try {
        for (let t = 0; t < transactions; t += 1) {
          const values = Array.from({ length: perTransaction }, (_, i) => `(${t * perTransaction + i + 1}, 'note ${t}')`);
          await client.query(`INSERT INTO notes VALUES ${values.join(', ')}`);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      } finally {
        await client.end();
      }
    })();
    await until('some notes are in the folder', async () => eventsOf('notes').length >= 100);
    agent!.child.kill('SIGKILL');
    await agent!.exited;
    const atKill = eventsOf('notes').length;
    await writer;
    assert.ok(atKill < transactions * perTransaction, `killed mid-stream (${atKill} written)`);
    await startAgent();
    const total = transactions * perTransaction;
    await until(
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
    await command(pipelineId, 'STOP');
    await until('the pipeline is stopped', async () => (await status()).status === 'STOPPED');
    const slot = `dpc_${pipelineId.replaceAll('-', '')}`;
    const slots = async () =>
      (await sql.query('SELECT slot_name FROM pg_replication_slots WHERE slot_name = $1', [slot])).rowCount;
    assert.equal(await slots(), 1, 'stop keeps the slot');
    await sql.query("INSERT INTO orders VALUES (6, 'grape', 6, 'while stopped')");
    await command(pipelineId, 'START');
    const arrived = await until('the change made while stopped arrives', async () => {
      const all = eventsOf('orders');
      return all.length >= 9 && all;
    });
    assert.deepEqual(arrived.at(-1)!.after, { id: 6, item: 'grape', qty: 6, note: 'while stopped' });
    assert.equal(arrived.length, 9);
    await until('running again', async () => (await status()).status === 'RUNNING');
    await command(pipelineId, 'STOP');
    await until('stopped again', async () => (await status()).status === 'STOPPED');

    const deleted = await api('DELETE', `${pipelines()}/${pipelineId}?dropSlot=true`);
    assert.equal(deleted.status, 204, deleted.text);
    await until('the agent dropped the slot', async () => (await slots()) === 0);
    await until(
      'and the publication',
      async () => (await sql.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [slot])).rowCount === 0,
    );
    assert.equal((await api('GET', `${pipelines()}/${pipelineId}`)).status, 404);
  });

  test('a source without wal_level=logical fails start naming wal_level; sqlserver, oracle and db2ibmi are not supported by this agent', async () => {
    const plainSql = new pg.Client(plain.url);
    await plainSql.connect();
    await plainSql.query('CREATE TABLE orders (id integer PRIMARY KEY)');
    await plainSql.end();
    const written = await api('POST', `/secrets/${agentId}/secret-value?overwrite=true`, {
      secret: { name: 'cdc-plain', key: 'password', type: 'PASSWORD', value: plain.password },
    });
    assert.equal(written.status, 200, written.text);
    const body = definition('replica-only', plain, 'postgres', ['orders']);
    body.streamingSource.connection.password.secretName = 'cdc-plain';
    const created = await api('POST', pipelines(), body);
    assert.equal(created.status, 201, created.text);
    await command(created.body.streamingPipelineId, 'START');
    const failed = await until('the start fails', async () => {
      const current = await status(created.body.streamingPipelineId);
      return current.status === 'FAILED' && current;
    });
    assert.match(failed.message, /wal_level is replica; change data capture needs wal_level=logical/);

    for (const type of ['sqlserver', 'oracle', 'db2ibmi']) {
      const other = await api('POST', pipelines(), definition(`from-${type}`, source, type, ['orders']));
      assert.equal(other.status, 201, other.text);
      await command(other.body.streamingPipelineId, 'START');
      const refused = await until(`the ${type} start fails`, async () => {
        const current = await status(other.body.streamingPipelineId);
        return current.status === 'FAILED' && current;
      });
      assert.equal(refused.message, `source type ${type} is not supported by this agent`);
    }
  });
});
