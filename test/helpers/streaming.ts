/**
 * What the streaming tests share. For those with real processes (StreamingRig): a real server, a streaming
 * agent registered on it and run as a process (`dpc agent run`, with the environment each test's target
 * needs), the agent's vault written through the API, and the steps of a pipeline (create, START/STOP, wait
 * for a status); `close()` ends what it started, the agent first. For all: a PostgreSQL source cluster of the
 * test's own with wal_level=logical, its definition as a pipeline's `streamingSource` (or the agent's source
 * object, in-process), a `snowflake` target and the warehouse beside the source that stands in for it,
 * change files read back, a writer in the background, the scenario the object store tests share, and
 * `until`, which waits for a condition and, on timeout, says what the agent last logged.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { PostgresSource } from '../../src/agent/streaming/postgres.ts';
import type { ChangeEvent } from '../../src/agent/streaming/target.ts';
import { TestServer, type Answer, type Caller, type StoreKind } from './harness.ts';
import { spawnAgent } from './processes.ts';
import { startPrivatePostgres, type PrivatePostgres } from './private-postgres.ts';

export type { ChangeEvent };

export type SpawnedAgent = Awaited<ReturnType<typeof spawnAgent>>;

/**
 * Calls `check` until it answers something truthy, which it returns; fails after `timeoutMs` saying what it
 * waited for (and `context()`, e.g. an agent's last lines). An error `check` throws fails at once, unless
 * `ignoreErrors` (for a service that does not answer yet).
 */
export async function until<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  options: { timeoutMs?: number; intervalMs?: number; ignoreErrors?: boolean; context?: () => string } = {},
): Promise<T> {
  const { timeoutMs = 30_000, intervalMs = 100, ignoreErrors = false } = options;
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = ignoreErrors
      ? await Promise.resolve()
          .then(check)
          .catch(() => undefined)
      : await check();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  assert.fail(`timed out waiting until ${what}${options.context ? `; ${options.context()}` : ''}`);
}

/** A folder of the test's own under the system's temporary folder. */
export const tempDir = (prefix: string) => mkdtempSync(path.join(tmpdir(), prefix));

/** A PostgreSQL cluster with wal_level=logical, a client connected to it, and `statements` run first. */
export interface LogicalSource {
  cluster: PrivatePostgres;
  sql: pg.Client;
  stop(): Promise<void>;
}

export async function startLogicalSource(statements: string[] = []): Promise<LogicalSource> {
  const cluster = await startPrivatePostgres({ wal_level: 'logical' });
  const sql = new pg.Client(cluster.url);
  try {
    await sql.connect();
    for (const statement of statements) await sql.query(statement);
  } catch (error) {
    await sql.end().catch(() => undefined);
    await cluster.stop();
    throw error;
  }
  return {
    cluster,
    sql,
    async stop() {
      await sql.end().catch(() => undefined);
      await cluster.stop();
    },
  };
}

/** The agent's PostgreSQL source for a cluster's `postgres` database, for a run in the test's own process. */
export function postgresSourceOf(cluster: PrivatePostgres): PostgresSource {
  return new PostgresSource({
    host: cluster.host,
    port: cluster.port,
    database: 'postgres',
    user: cluster.user,
    password: cluster.password,
  });
}

/**
 * A pipeline's `streamingSource` for `tables` (`table` in `public`, or `schema.table`) of a server: PostgreSQL
 * and its `postgres` database unless told otherwise (`database: false` for MySQL, which names none); its
 * password a secret reference to `secretName`.
 */
export function sourceDefinition(
  cluster: { host: string; port: number; user: string },
  tables: string[],
  options: { secretName?: string; type?: string; database?: string | false } = {},
) {
  const { secretName = 'cdc-source', type = 'postgres', database = 'postgres' } = options;
  return {
    type,
    connection: {
      host: cluster.host,
      port: cluster.port,
      ...(database !== false && { database }),
      username: cluster.user,
      password: { secretName, secretKey: 'password', secretType: 'PASSWORD' },
    },
    tables: tables.map((table) => {
      const [schema, name] = table.includes('.') ? table.split('.') : ['public', table];
      return { schema: schema!, table: name! };
    }),
  };
}

/** What the agent's vault holds for a `snowflake` target's private key: the warehouse stand-in reads none. */
export const STAND_IN_PRIVATE_KEY = '-----BEGIN PRIVATE KEY-----\nnot used by the stand-in\n-----END PRIVATE KEY-----';

/**
 * A `snowflake` target writing to `tableSchema` (the tables' names as the source's), its private key the
 * secret `snowflake-key`. An agent given DPC_AGENT_WAREHOUSE_URL writes it to that warehouse instead.
 */
export function snowflakeTarget(tableSchema: string) {
  return {
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
  };
}

/**
 * A database `warehouse` on the source's cluster, for the agent's warehouse (DPC_AGENT_WAREHOUSE_URL): its
 * URL, and a client connected to it.
 */
export async function warehouseBeside(source: LogicalSource): Promise<{ url: string; client: pg.Client }> {
  await source.sql.query('CREATE DATABASE warehouse');
  const url = new URL(source.cluster.url);
  url.pathname = '/warehouse';
  const client = new pg.Client(url.toString());
  await client.connect();
  return { url: url.toString(), client };
}

/** The events of a change file's text (JSON lines), in order. */
export function eventsOfText(text: string): ChangeEvent[] {
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as ChangeEvent);
}

/** Every event of the change files (JSON lines) in `folder`: files in name order, lines in order. */
export function folderEvents(folder: string): ChangeEvent[] {
  if (!existsSync(folder)) return [];
  return readdirSync(folder)
    .filter((name) => name.endsWith('.jsonl'))
    .sort()
    .flatMap((name) => eventsOfText(readFileSync(path.join(folder, name), 'utf8')));
}

/**
 * Writes in the background, on a connection of its own to `url`: `transactions` times the statements of
 * `statementsOf(t)` (one transaction each unless they say otherwise), pausing `pauseMs` after every
 * `pauseEvery`th. Resolves once all are written.
 */
export async function writeInBackground(
  url: string,
  transactions: number,
  statementsOf: (t: number) => string[],
  { pauseMs = 10, pauseEvery = 1 } = {},
): Promise<void> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    for (let t = 0; t < transactions; t += 1) {
      for (const statement of statementsOf(t)) await client.query(statement);
      if ((t + 1) % pauseEvery === 0) await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
  } finally {
    await client.end();
  }
}

/**
 * What the object store tests (s3, abs) check of their store, through `eventsOf` (the events of a table's
 * change files, in order): a pipeline streaming `orders` (rows 1 apple, 2 bread at its snapshot) gets an
 * insert, an update and a delete; then a kill -9 while 300 inserts flow, and a restart: each change is in
 * the store once, in order, and the status counts them.
 */
export async function onceAcrossAKill(
  rig: StreamingRig,
  source: LogicalSource,
  pipelineId: string,
  eventsOf: (table: string) => Promise<{ op: string; after: Record<string, unknown> | null }[]>,
): Promise<void> {
  await source.sql.query("INSERT INTO orders VALUES (3, 'cheese')");
  await source.sql.query("UPDATE orders SET item = 'apples' WHERE id = 1");
  await source.sql.query('DELETE FROM orders WHERE id = 2');
  const events = await rig.until('the changes are in the store', async () => {
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

  // Killed while changes flow; they are all in the store once the restarted agent has caught up.
  const writer = writeInBackground(
    source.cluster.url,
    300,
    (t) => [`INSERT INTO orders VALUES (${100 + t}, 'item ${100 + t}')`],
    {
      pauseMs: 20,
      pauseEvery: 10,
    },
  );
  await rig.until('some of them arrive', async () => (await eventsOf('orders')).length >= 30);
  await rig.killAgent();
  await writer;
  await rig.startAgent();
  await rig.until('every change is in the store', async () => (await eventsOf('orders')).length >= 305, 60_000);
  // Another moment: nothing more arrives.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const all = await eventsOf('orders');
  assert.equal(all.length, 305, 'no change twice');
  assert.deepEqual(
    all.slice(5).map((event) => event.after?.id),
    Array.from({ length: 300 }, (_, i) => i + 100),
    'each change once, in order',
  );
  assert.deepEqual((await rig.status(pipelineId)).rowsPerTable, { 'public.orders': 305 });
}

export interface StreamingRigOptions {
  /** The server's store; SQLite unless named. */
  kind?: StoreKind;
  /** The agent's environment (its object store, blob endpoint, warehouse), for every start of it. */
  agentEnv?: NodeJS.ProcessEnv;
  /** Secrets written to the agent's vault once it is connected (each as the `password` key of its name). */
  secrets?: Record<string, string>;
  /** The prefix of the agent's state folder. */
  stateDirPrefix?: string;
}

/** A server, a project on it and a streaming agent process, with the calls the streaming tests make. */
export class StreamingRig {
  agent: SpawnedAgent | undefined;
  private readonly dirs: string[] = [];

  private constructor(
    readonly server: TestServer,
    readonly caller: Caller,
    readonly projectId: string,
    readonly agentId: string,
    private readonly credentials: { clientId: string; clientSecret: string },
    readonly stateDir: string,
    private readonly agentEnv: NodeJS.ProcessEnv,
  ) {
    this.dirs.push(stateDir);
  }

  /**
   * The prologue: a server on `kind` (short agent windows, so that a killed agent's work comes back soon), an
   * account and a project, a streaming agent with credentials, its process started and connected, and the
   * secrets in its vault. What it started is ended if a step fails.
   */
  static async start(options: StreamingRigOptions = {}): Promise<StreamingRig> {
    const server = await TestServer.start(options.kind ?? 'sqlite', { agentConnectedWindowSeconds: 6, agentWorkLeaseSeconds: 5 });
    let rig: StreamingRig | undefined;
    try {
      const { caller, projectId } = await server.prologue();
      const api = (method: string, apiPath: string, body?: unknown) => server.api(method, apiPath, { token: caller.token, body });
      const created = await api('POST', '/agents', {
        name: 'cdc',
        agentType: 'streaming',
        cloudProvider: 'aws',
        deployment: 'fargate',
      });
      assert.equal(created.status, 201, created.text);
      const credentials = await api('POST', `/agents/${created.body.agentId}/credentials`);
      assert.equal(credentials.status, 201, credentials.text);
      const stateDir = tempDir(options.stateDirPrefix ?? 'dpc-agent-streaming-');
      rig = new StreamingRig(server, caller, projectId, created.body.agentId, credentials.body, stateDir, options.agentEnv ?? {});
      await rig.startAgent();
      await rig.until('the agent is connected', async () => (await rig!.api('GET', `/agents/${rig!.agentId}`)).body.connected);
      await rig.writeSecrets(options.secrets ?? {});
      return rig;
    } catch (error) {
      if (rig) await rig.close();
      else await server.close();
      throw error;
    }
  }

  /** A call to the API as the account's admin. */
  api<T = any>(method: string, apiPath: string, body?: unknown): Promise<Answer<T>> {
    return this.server.api<T>(method, apiPath, { token: this.caller.token, body });
  }

  /** `until` (above), saying on timeout what the agent last logged. */
  until<T>(
    what: string,
    check: () => Promise<T | undefined | false> | T | undefined | false,
    timeoutMs = 30_000,
    options: { ignoreErrors?: boolean } = {},
  ): Promise<T> {
    return until(what, check, {
      timeoutMs,
      ...options,
      context: () => `the agent's last lines:\n${this.agent?.logs().split('\n').slice(-15).join('\n')}`,
    });
  }

  /** Starts the agent process (again), with the rig's environment and `env`. */
  async startAgent(env: NodeJS.ProcessEnv = {}): Promise<void> {
    this.agent = await spawnAgent(
      { url: this.server.url, ...this.credentials, stateDir: this.stateDir },
      { ...this.agentEnv, ...env },
    );
  }

  /** kill -9 of the agent process; resolves once it has exited. */
  async killAgent(): Promise<void> {
    this.agent?.child.kill('SIGKILL');
    await this.agent?.exited;
  }

  /** Writes each secret to the agent's vault as the `password` key of its name (overwriting one there). */
  async writeSecrets(secrets: Record<string, string>): Promise<void> {
    for (const [name, value] of Object.entries(secrets)) {
      const written = await this.api('POST', `/secrets/${this.agentId}/secret-value?overwrite=true`, {
        secret: { name, key: 'password', type: 'PASSWORD', value },
      });
      assert.equal(written.status, 200, written.text);
    }
  }

  /** The path of the project's streaming pipelines, or of one of them. */
  pipelines(id?: string): string {
    return `/projects/${this.projectId}/streaming-pipelines${id ? `/${id}` : ''}`;
  }

  /** Creates a pipeline on the rig's agent (201); its id. */
  async createPipeline(body: Record<string, unknown>): Promise<string> {
    const created = await this.api('POST', this.pipelines(), { agentId: this.agentId, ...body });
    assert.equal(created.status, 201, created.text);
    return created.body.streamingPipelineId;
  }

  /** START or STOP (202). */
  async command(id: string, verb: 'START' | 'STOP'): Promise<void> {
    const answer = await this.api('POST', `${this.pipelines(id)}/commands`, { command: verb });
    assert.equal(answer.status, 202, answer.text);
  }

  async status(id: string) {
    return (await this.api('GET', `${this.pipelines(id)}/status`)).body;
  }

  /** Waits until the pipeline is RUNNING past its snapshot; fails at once if it FAILED. Its status. */
  untilStreaming(id: string, timeoutMs?: number) {
    return this.until(
      'the pipeline streams',
      async () => {
        const current = await this.status(id);
        assert.notEqual(current.status, 'FAILED', current.message);
        return current.status === 'RUNNING' && current.phase === 'streaming' && current;
      },
      timeoutMs,
    );
  }

  /** Waits until the pipeline's status is `status`. Its status. */
  untilStatus(id: string, status: string, timeoutMs?: number) {
    return this.until(
      `the pipeline is ${status}`,
      async () => {
        const current = await this.status(id);
        return current.status === status && current;
      },
      timeoutMs,
    );
  }

  /** START, then wait until it streams. */
  async startStreaming(id: string) {
    await this.command(id, 'START');
    return this.untilStreaming(id);
  }

  /** STOP, then wait until it is STOPPED. */
  async stop(id: string) {
    await this.command(id, 'STOP');
    return this.untilStatus(id, 'STOPPED');
  }

  /** A folder of the test's own, removed by close(). */
  tempDir(prefix: string): string {
    const dir = tempDir(prefix);
    this.dirs.push(dir);
    return dir;
  }

  /** The epilogue: kill -9 of the agent, the server and its store closed, the rig's folders removed. */
  async close(): Promise<void> {
    await this.killAgent();
    await this.server.close();
    for (const dir of this.dirs) rmSync(dir, { recursive: true, force: true });
  }
}
