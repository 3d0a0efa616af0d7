import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { BlobServiceClient, StorageSharedKeyCredential, type ContainerClient } from '@azure/storage-blob';
import pg from 'pg';
import { TestServer, type Caller } from '../helpers/harness.ts';
import { freePort, spawnAgent } from '../helpers/processes.ts';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';

/**
 * An `abs` target: the agent (a real process) writes its change files to an Azure Blob container through
 * @azure/storage-blob with the account key from its vault, here to Azurite on loopback (the agent is given
 * its endpoint with DPC_AGENT_BLOB_ENDPOINT). Snapshot, insert, update, delete; a kill -9 mid-stream and a
 * restart leave each change in the container once. The server's store plays no part, so SQLite only.
 */

interface ChangeEvent {
  op: string;
  after: Record<string, unknown> | null;
}

// Azurite's development account, as documented by Azure.
const ACCOUNT = 'devstoreaccount1';
const KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

let server: TestServer;
let caller: Caller;
let projectId: string;
let source: PrivatePostgres;
let sql: pg.Client;
let azurite: ChildProcess;
let azuriteDir: string;
let stateDir: string;
let endpoint: string;
let container: ContainerClient;
let agent: Awaited<ReturnType<typeof spawnAgent>> | undefined;
let credentials: { clientId: string; clientSecret: string };
let agentId: string;

const api = (method: string, apiPath: string, body?: unknown) => server.api(method, apiPath, { token: caller.token, body });

async function until<T>(what: string, check: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await check().catch(() => undefined);
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  assert.fail(`timed out waiting until ${what}; the agent's last lines:\n${agent?.logs().split('\n').slice(-15).join('\n')}`);
}

const startAgent = async () => {
  agent = await spawnAgent({ url: server.url, ...credentials, stateDir }, { DPC_AGENT_BLOB_ENDPOINT: `${endpoint}/{account}` });
};

/** Every event in the container under `cdc/public/<table>/`, blobs in name order. */
async function eventsOf(table: string): Promise<ChangeEvent[]> {
  const names: string[] = [];
  for await (const blob of container.listBlobsFlat({ prefix: `cdc/public/${table}/` })) names.push(blob.name);
  const events: ChangeEvent[] = [];
  for (const name of names.sort()) {
    // A restarted agent removes a blob written after its committed position: listed a moment ago, gone now.
    const body = await container
      .getBlobClient(name)
      .downloadToBuffer()
      .catch((error: { statusCode?: number }) => {
        if (error.statusCode === 404) return undefined;
        throw error;
      });
    if (!body) continue;
    events.push(
      ...body
        .toString('utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as ChangeEvent),
    );
  }
  return events;
}

before(async () => {
  azuriteDir = mkdtempSync(path.join(tmpdir(), 'dpc-azurite-'));
  const port = await freePort();
  azurite = spawn(
    path.resolve('node_modules/.bin/azurite-blob'),
    [
      '--blobHost',
      '127.0.0.1',
      '--blobPort',
      String(port),
      '--inMemoryPersistence',
      '--disableTelemetry',
      '--skipApiVersionCheck',
      '--silent',
    ],
    // In memory; its working folder (where it would put anything else) is the test's own.
    { stdio: 'ignore', cwd: azuriteDir },
  );
  endpoint = `http://127.0.0.1:${port}`;
  container = new BlobServiceClient(`${endpoint}/${ACCOUNT}`, new StorageSharedKeyCredential(ACCOUNT, KEY)).getContainerClient(
    'lake',
  );
  await until('Azurite answers', async () => (await container.createIfNotExists(), true));
  server = await TestServer.start('sqlite', { agentConnectedWindowSeconds: 6, agentWorkLeaseSeconds: 5 });
  ({ caller, projectId } = await server.prologue());
  source = await startPrivatePostgres({ wal_level: 'logical' });
  sql = new pg.Client(source.url);
  await sql.connect();
  await sql.query('CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL)');
  await sql.query("INSERT INTO orders VALUES (1, 'apple'), (2, 'bread')");
  stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-abs-'));
  agentId = (await api('POST', '/agents', { name: 'cdc', agentType: 'streaming', cloudProvider: 'aws', deployment: 'fargate' }))
    .body.agentId;
  credentials = (await api('POST', `/agents/${agentId}/credentials`)).body;
  await startAgent();
  await until('the agent is connected', async () => (await api('GET', `/agents/${agentId}`)).body.connected);
  for (const [name, value] of [
    ['cdc-source', source.password],
    ['lake-key', KEY],
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
  azurite?.kill('SIGKILL');
  await sql?.end().catch(() => undefined);
  await source?.stop();
  await server?.close();
  for (const dir of [stateDir, azuriteDir]) if (dir) rmSync(dir, { recursive: true, force: true });
});

test('change files reach an Azure Blob container (Azurite); after a kill -9 and a restart, each change is there once', async () => {
  const created = await api('POST', `/projects/${projectId}/streaming-pipelines`, {
    name: 'orders-to-abs',
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
    streamingTarget: {
      type: 'abs',
      accountName: ACCOUNT,
      accountKey: { secretName: 'lake-key', secretKey: 'password' },
      container: 'lake',
      prefix: 'cdc',
    },
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
  const events = await until('the changes are in the container', async () => {
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
  await until('every change is in the container', async () => (await eventsOf('orders')).length >= 305, 60_000);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const all = await eventsOf('orders');
  assert.equal(all.length, 305, 'no change twice');
  assert.deepEqual(
    all.slice(5).map((event) => event.after?.id),
    Array.from({ length: 300 }, (_, i) => i + 100),
    'each change once, in order',
  );
  assert.deepEqual((await api('GET', `${pipeline}/status`)).body.rowsPerTable, { 'public.orders': 305 });
});
