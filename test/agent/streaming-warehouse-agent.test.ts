import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { environmentSchema } from '../../src/agent/warehouse/roles.ts';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';

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
    let server: TestServer;
    let caller: Caller;
    let projectId: string;
    let source: PrivatePostgres;
    let sql: pg.Client;
    let warehouse: pg.Client;
    let warehouseUrl: string;
    let stateDir: string;
    let agentId: string;
    let credentials: { clientId: string; clientSecret: string };
    let agent: Awaited<ReturnType<typeof spawnAgent>> | undefined;
    let pipelineId: string;

    const api = (method: string, apiPath: string, body?: unknown) => server.api(method, apiPath, { token: caller.token, body });
    const pipelines = () => `/projects/${projectId}/streaming-pipelines`;
    const status = async (id = pipelineId) => (await api('GET', `${pipelines()}/${id}/status`)).body;

    async function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const value = await check();
        if (value) return value;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.fail(`timed out waiting until ${what}; the agent's last lines:\n${agent?.logs().split('\n').slice(-15).join('\n')}`);
    }

    const startAgent = async (env: Record<string, string> = {}) => {
      agent = await spawnAgent({ url: server.url, ...credentials, stateDir }, { DPC_AGENT_WAREHOUSE_URL: warehouseUrl, ...env });
    };

    const rows = async (query: string) => {
      try {
        return (await warehouse.query(query)).rows;
      } catch (error) {
        if ((error as { code?: string }).code === '42P01') return []; // not made yet
        throw error;
      }
    };

    const snowflakeTarget = (tableSchema: string) => ({
      type: 'snowflake',
      connection: {
        accountName: 'acme-eu1',
        username: 'STREAMING',
        authentication: {
          type: 'key-pair',
          privateKey: { secretName: 'snowflake-key', key: 'password', secretType: 'PASSWORD' },
        },
      },
      role: 'STREAMING_ROLE',
      warehouse: 'STREAMING_WH',
      database: 'RAW',
      stageSchema: 'STAGE',
      stageName: 'CDC_STAGE',
      tableSchema,
      tablePrefixType: 'none',
      transformationType: 'copy_table',
      temporalMapping: 'native',
    });

    async function command(id: string, verb: 'START' | 'STOP') {
      const answer = await api('POST', `${pipelines()}/${id}/commands`, { command: verb });
      assert.equal(answer.status, 202, answer.text);
    }

    before(async () => {
      server = await TestServer.start(kind, { agentConnectedWindowSeconds: 6, agentWorkLeaseSeconds: 5 });
      ({ caller, projectId } = await server.prologue());
      source = await startPrivatePostgres({ wal_level: 'logical' });
      sql = new pg.Client(source.url);
      await sql.connect();
      await sql.query('CREATE DATABASE warehouse');
      await sql.query(
        'CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL, qty integer NOT NULL, placed timestamptz)',
      );
      await sql.query('CREATE TABLE notes (id integer PRIMARY KEY, body text)');
      await sql.query(
        "INSERT INTO orders VALUES (1, 'apple', 1, '2026-03-01T10:00:00Z'), (2, 'bread', 2, NULL), (3, 'cheese', 3, NULL)",
      );
      const url = new URL(source.url);
      url.pathname = '/warehouse';
      warehouseUrl = url.toString();
      warehouse = new pg.Client(warehouseUrl);
      await warehouse.connect();
      stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-cdc-wh-'));
      agentId = (
        await api('POST', '/agents', { name: 'cdc-wh', agentType: 'streaming', cloudProvider: 'aws', deployment: 'fargate' })
      ).body.agentId;
      credentials = (await api('POST', `/agents/${agentId}/credentials`)).body;
      await startAgent();
      await until('the agent is connected', async () => (await api('GET', `/agents/${agentId}`)).body.connected);
      for (const [name, value] of [
        ['cdc-source', source.password],
        ['snowflake-key', '-----BEGIN PRIVATE KEY-----\nnot used by the stand-in\n-----END PRIVATE KEY-----'],
      ]) {
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
      await warehouse?.end().catch(() => undefined);
      await source?.stop();
      await server?.close();
      if (stateDir) rmSync(stateDir, { recursive: true, force: true });
    });

    test('snapshot, insert, update, delete, a new column and truncate reach a change table and an applied copy', async () => {
      const created = await api('POST', pipelines(), {
        name: 'orders-to-warehouse',
        agentId,
        advancedProperties: { 'snapshot.mode': 'initial' },
        streamingSource: {
          type: 'postgres',
          connection: {
            host: source.host,
            port: source.port,
            database: 'postgres',
            username: source.user,
            password: { secretName: 'cdc-source', secretKey: 'password', secretType: 'PASSWORD' },
          },
          tables: ['orders', 'notes'].map((table) => ({ schema: 'public', table })),
        },
        streamingTarget: snowflakeTarget('raw_cdc'),
      });
      assert.equal(created.status, 201, created.text);
      pipelineId = created.body.streamingPipelineId;
      await command(pipelineId, 'START');
      await until('the pipeline streams', async () => {
        const current = await status();
        assert.notEqual(current.status, 'FAILED', current.message);
        return current.status === 'RUNNING' && current.phase === 'streaming';
      });
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
      await until('every change is in the change table', async () => (await changes()).length >= 7);
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
      const shown = await until('the status shows the last position', async () => {
        const current = await status();
        return current.position === all[6]._dpc_position && current;
      });
      assert.deepEqual(shown.rowsPerTable, { 'public.orders': 7 });

      await sql.query('TRUNCATE orders');
      await until('the truncate empties the applied copy', async () => (await rows('SELECT * FROM raw_cdc.orders')).length === 0);
      assert.equal((await changes()).at(-1)._dpc_op, 'truncate');
    });

    test('a kill -9 of the agent mid-stream: once restarted it resumes, each change once in the change table and the applied copy', async () => {
      const transactions = 300;
      const perTransaction = 5;
      const writer = (async () => {
        const client = new pg.Client(source.url);
        await client.connect();
        try {
          for (let t = 0; t < transactions; t += 1) {
            const values = Array.from({ length: perTransaction }, (_, i) => `(${t * perTransaction + i + 1}, 'note ${t}')`);
            await client.query(`INSERT INTO notes VALUES ${values.join(', ')}`);
            if (t % 50 === 49) await client.query(`UPDATE notes SET body = 'updated' WHERE id = ${t * perTransaction}`);
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
        } finally {
          await client.end();
        }
      })();
      const count = async (table: string) => Number((await rows(`SELECT count(*) AS n FROM raw_cdc.${table}`))[0]?.n ?? 0);
      await until('some notes are in the warehouse', async () => (await count('notes_changes')) >= 100);
      agent!.child.kill('SIGKILL');
      await agent!.exited;
      const atKill = await count('notes_changes');
      await writer;
      const total = transactions * perTransaction;
      const updates = transactions / 50;
      assert.ok(atKill < total, `killed mid-stream (${atKill} written)`);
      await startAgent();
      await until('every note is in the warehouse', async () => (await count('notes_changes')) >= total + updates, 60_000);
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
      const shown = await until('the status counts every change', async () => {
        const current = await status();
        return current.rowsPerTable?.['public.notes'] === total + updates && current;
      });
      assert.equal(shown.status, 'RUNNING');
    });

    test('an agent whose warehouse roles own only their schema (DPC_AGENT_WAREHOUSE_ROLE_KEY) writes there, and names the refusal elsewhere', async () => {
      await command(pipelineId, 'STOP');
      await until('stopped', async () => (await status()).status === 'STOPPED');
      agent!.child.kill('SIGKILL');
      await agent!.exited;
      await startAgent({ DPC_AGENT_WAREHOUSE_ROLE_KEY: Buffer.from('a role key for the test only').toString('base64') });
      const own = environmentSchema(caller.accountId, 'default');
      const definition = (name: string, tableSchema: string) => ({
        name,
        agentId,
        advancedProperties: { 'snapshot.mode': 'initial' },
        streamingSource: {
          type: 'postgres',
          connection: {
            host: source.host,
            port: source.port,
            database: 'postgres',
            username: source.user,
            password: { secretName: 'cdc-source', secretKey: 'password', secretType: 'PASSWORD' },
          },
          tables: [{ schema: 'public', table: 'notes' }],
        },
        streamingTarget: snowflakeTarget(tableSchema),
      });
      const elsewhere = await api('POST', pipelines(), definition('notes-elsewhere', 'not_its_schema'));
      assert.equal(elsewhere.status, 201, elsewhere.text);
      await command(elsewhere.body.streamingPipelineId, 'START');
      const refused = await until('the start elsewhere fails', async () => {
        const current = await status(elsewhere.body.streamingPipelineId);
        return current.status === 'FAILED' && current;
      });
      assert.match(refused.message, /permission denied/);

      const created = await api('POST', pipelines(), definition('notes-own-schema', own));
      assert.equal(created.status, 201, created.text);
      await command(created.body.streamingPipelineId, 'START');
      await until('the pipeline streams', async () => {
        const current = await status(created.body.streamingPipelineId);
        assert.notEqual(current.status, 'FAILED', current.message);
        return current.status === 'RUNNING' && current.phase === 'streaming';
      });
      await sql.query("INSERT INTO notes VALUES (100000, 'into the role schema')");
      await until(
        "the change is in the role's schema",
        async () => (await rows(`SELECT body FROM ${own}.notes WHERE id = 100000`)).length === 1,
      );
      const owner = await rows(`SELECT tableowner FROM pg_tables WHERE schemaname = '${own}' AND tablename = 'notes_changes'`);
      assert.equal(owner[0]?.tableowner, own, "the tables belong to the environment's role");
      await command(created.body.streamingPipelineId, 'STOP');
      await until('stopped', async () => (await status(created.body.streamingPipelineId)).status === 'STOPPED');
    });
  },
);
