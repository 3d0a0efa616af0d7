import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import pg from 'pg';
import S3rver from 's3rver';
import { TestServer, type Caller } from '../helpers/harness.ts';
import { freePort, spawnAgent } from '../helpers/processes.ts';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';

/**
 * An `s3` target on an S3-compatible store: the agent (a real process) is given `--object-store
 * http://127.0.0.1:<port>` (here through DPC_AGENT_OBJECT_STORE) and writes its change files through
 * @aws-sdk/client-s3 to an S3 stand-in on loopback (s3rver), with credentials from its environment. The
 * server's store plays no part in what reaches the bucket, so this runs on SQLite only.
 */

interface ChangeEvent {
  op: string;
  after: Record<string, unknown> | null;
  before: Record<string, unknown> | null;
}

let server: TestServer;
let caller: Caller;
let projectId: string;
let source: PrivatePostgres;
let sql: pg.Client;
let s3: S3rver;
let s3Dir: string;
let stateDir: string;
let endpoint: string;
let client: S3Client;
let agent: Awaited<ReturnType<typeof spawnAgent>> | undefined;
let credentials: { clientId: string; clientSecret: string };
const S3_ENV = { AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' };

const api = (method: string, apiPath: string, body?: unknown) => server.api(method, apiPath, { token: caller.token, body });

async function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await check();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  assert.fail(`timed out waiting until ${what}; the agent's last lines:\n${agent?.logs().split('\n').slice(-15).join('\n')}`);
}

const startAgent = async () => {
  agent = await spawnAgent({ url: server.url, ...credentials, stateDir }, { DPC_AGENT_OBJECT_STORE: endpoint, ...S3_ENV });
};

/** Every event in the bucket under `cdc/public/<table>/`, objects in key order. */
async function eventsOf(table: string): Promise<ChangeEvent[]> {
  const prefix = `cdc/public/${table}/`;
  const listed = await client.send(new ListObjectsV2Command({ Bucket: 'lake', Prefix: prefix }));
  const keys = (listed.Contents ?? []).map((object) => object.Key!).sort();
  const events: ChangeEvent[] = [];
  for (const key of keys) {
    // A restarted agent removes a file written after its committed position: listed a moment ago, gone now.
    const object = await client.send(new GetObjectCommand({ Bucket: 'lake', Key: key })).catch((error: Error) => {
      if (error.name === 'NoSuchKey') return undefined;
      throw error;
    });
    if (!object) continue;
    const text = await object.Body!.transformToString();
    events.push(
      ...text
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as ChangeEvent),
    );
  }
  return events;
}

before(async () => {
  s3Dir = mkdtempSync(path.join(tmpdir(), 'dpc-s3rver-'));
  const port = await freePort();
  s3 = new S3rver({ address: '127.0.0.1', port, silent: true, directory: s3Dir, configureBuckets: [{ name: 'lake' }] });
  await s3.run();
  endpoint = `http://127.0.0.1:${port}`;
  client = new S3Client({
    endpoint,
    forcePathStyle: true,
    region: 'us-east-1',
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
  });
  server = await TestServer.start('sqlite', { agentConnectedWindowSeconds: 6, agentWorkLeaseSeconds: 5 });
  ({ caller, projectId } = await server.prologue());
  source = await startPrivatePostgres({ wal_level: 'logical' });
  sql = new pg.Client(source.url);
  await sql.connect();
  await sql.query('CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL)');
  await sql.query("INSERT INTO orders VALUES (1, 'apple'), (2, 'bread')");
  stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-s3-'));
  const agentId = (
    await api('POST', '/agents', { name: 'cdc', agentType: 'streaming', cloudProvider: 'aws', deployment: 'fargate' })
  ).body.agentId;
  credentials = (await api('POST', `/agents/${agentId}/credentials`)).body;
  await startAgent();
  await until('the agent is connected', async () => (await api('GET', `/agents/${agentId}`)).body.connected);
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
  await server?.close();
  client?.destroy();
  await s3?.close();
  for (const dir of [stateDir, s3Dir]) if (dir) rmSync(dir, { recursive: true, force: true });
});

test('change files reach an S3-compatible bucket; after a kill -9 and a restart, each change is there once', async () => {
  const agentId = (await api('GET', '/agents')).body.results[0].agentId;
  const created = await api('POST', `/projects/${projectId}/streaming-pipelines`, {
    name: 'orders-to-s3',
    agentId,
    streamingSource: {
      type: 'postgres',
      connection: {
        host: source.host,
        port: source.port,
        database: 'postgres',
        username: source.user,
        password: { secretName: 'cdc-source', secretKey: 'password' },
      },
      tables: [{ schema: 'public', table: 'orders' }],
    },
    streamingTarget: { type: 's3', bucket: 'lake', prefix: 'cdc' },
  });
  assert.equal(created.status, 201, created.text);
  const pipeline = `/projects/${projectId}/streaming-pipelines/${created.body.streamingPipelineId}`;
  assert.equal((await api('POST', `${pipeline}/commands`, { command: 'START' })).status, 202);
  await until('the pipeline streams', async () => {
    const current = (await api('GET', `${pipeline}/status`)).body;
    assert.notEqual(current.status, 'FAILED', current.message);
    return current.phase === 'streaming';
  });
  await sql.query("INSERT INTO orders VALUES (3, 'cheese')");
  await sql.query("UPDATE orders SET item = 'apples' WHERE id = 1");
  await sql.query('DELETE FROM orders WHERE id = 2');
  const events = await until('the changes are in the bucket', async () => {
    const all = await eventsOf('orders');
    return all.length >= 5 && all;
  });
  assert.deepEqual(
    events.map((event) => [event.op, event.after]),
    [
      ['snapshot', { id: 1, item: 'apple' }],
      ['snapshot', { id: 2, item: 'bread' }],
      ['insert', { id: 3, item: 'cheese' }],
      ['update', { id: 1, item: 'apples' }],
      ['delete', null],
    ],
  );

  // Killed while changes flow; they are all in the bucket once the restarted agent has caught up.
  const writer = (async () => {
    for (let id = 100; id < 400; id += 1) {
      await sql.query('INSERT INTO orders VALUES ($1, $2)', [id, `item ${id}`]);
      if (id % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  await until('some of them arrive', async () => (await eventsOf('orders')).length >= 30);
  agent!.child.kill('SIGKILL');
  await agent!.exited;
  await writer;
  await startAgent();
  const all = await until(
    'every change is in the bucket',
    async () => {
      const current = await eventsOf('orders');
      return current.length >= 305 && current;
    },
    60_000,
  );
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const ids = (await eventsOf('orders')).slice(5).map((event) => event.after?.id);
  assert.equal(all.length, 305);
  assert.deepEqual(
    ids,
    Array.from({ length: 300 }, (_, i) => i + 100),
    'each change once, in order',
  );
  const shown = (await api('GET', `${pipeline}/status`)).body;
  assert.deepEqual(shown.rowsPerTable, { 'public.orders': 305 });

  // SIGTERM with a pipeline running: the agent ends the run cleanly and exits 0; the pipeline stays RUNNING,
  // to be resumed by the next agent (its work is delivered again once the lease lapses).
  agent!.child.kill('SIGTERM');
  assert.equal(await agent!.exited, 0, agent!.logs());
  assert.equal((await api('GET', `${pipeline}/status`)).body.status, 'RUNNING');
  await sql.query("INSERT INTO orders VALUES (1000, 'after the restart')");
  await startAgent();
  const resumed = await until('the change made while the agent was down arrives', async () => {
    const current = await eventsOf('orders');
    return current.length >= 306 && current;
  });
  assert.equal(resumed.length, 306);
  assert.deepEqual(resumed.at(-1)!.after, { id: 1000, item: 'after the restart' });
});
