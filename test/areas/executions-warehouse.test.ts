import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';
import { scratchWarehouse, type ScratchWarehouse } from '../helpers/warehouses.ts';

const EXAMPLES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/pipelines');
const examples = Object.fromEntries(
  readdirSync(EXAMPLES).map((name) => [`pipelines/${name}`, readFileSync(path.join(EXAMPLES, name), 'utf8')]),
);

/**
 * An environment whose warehouse is PostgreSQL: the password reaches the agent's vault through E15, the
 * environment names the project connection that says which secret it is, and the reference agent (a
 * process) runs the example project there. A cancel mid-statement cancels it in PostgreSQL.
 */
describeEachStore('pipelines on an environment PostgreSQL warehouse', (kind) => {
  if (!process.env.TEST_DATABASE_URL) {
    test('needs TEST_DATABASE_URL for the warehouse', { skip: 'TEST_DATABASE_URL is not set' }, () => {});
    return;
  }
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let warehouse: ScratchWarehouse;
  let stateDir: string;
  let agent: Awaited<ReturnType<typeof spawnAgent>>;

  before(async () => {
    server = await TestServer.start(kind, { agentConnectedWindowSeconds: 3 });
    warehouse = await scratchWarehouse('postgres');
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'runner', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' },
    });
    const agentId = created.body.agentId;
    const credentials = (await server.api('POST', `/agents/${agentId}/credentials`, { token: caller.token })).body;
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    agent = await spawnAgent({ url: server.url, ...credentials, stateDir });
    await eventually(
      async () => (await server.api('GET', `/agents/${agentId}`, { token: caller.token })).body.connected,
      (connected) => connected === true,
    );
    const written = await server.api('POST', `/secrets/${agentId}/secret-value`, {
      token: caller.token,
      body: { secret: { name: 'warehouse-login', key: 'password', type: 'PASSWORD', value: 'pg-password-never-on-the-server' } },
    });
    assert.equal(written.status, 200, written.text);
    const connection = await server.api('POST', `/projects/${projectId}/connections`, {
      token: caller.token,
      body: {
        name: 'warehouse',
        authType: 'GENERIC_SECRET',
        platformConnectionType: 'COMPONENT_BASIC',
        connectionDetails: { connectionProperties: { secretName: 'warehouse-login', secretKey: 'password' } },
      },
    });
    assert.equal(connection.status, 201, connection.text);
    const url = new URL(warehouse.url!);
    const environment = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: {
        name: 'pg',
        defaultAgentId: agentId,
        warehouse: {
          type: 'postgres',
          host: url.hostname,
          port: Number(url.port),
          database: warehouse.database,
          user: decodeURIComponent(url.username),
          connectionName: 'warehouse',
          defaultSchema: 'sales mart',
        },
      },
    });
    assert.equal(environment.status, 201, environment.text);
    assert.equal(environment.body.warehouse.connectionName, 'warehouse');
    await uploadVersion(server, caller, projectId, 'pg', 'v1', {
      ...examples,
      'pipelines/sleep.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Sleep"]
    Sleep:
      type: "sql-executor"
      parameters:
        sqlScript: "SELECT pg_sleep(120)"
`),
    });
  });
  after(async () => {
    agent?.child.kill('SIGKILL');
    await agent?.exited;
    await server.close();
    await warehouse.drop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  const start = async (pipelineName: string) => {
    const answer = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'pg', pipelineName },
    });
    assert.equal(answer.status, 201, answer.text);
    return answer.body.pipelineExecutionId as string;
  };
  const status = async (id: string) =>
    (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token: caller.token })).body.status;

  test('the example runs in the environment schema of the PostgreSQL warehouse; the password only in the vault', async () => {
    const id = await start('pipelines/load-orders');
    const final = await eventually(
      () => status(id),
      (s) => s !== 'RUNNING',
      120_000,
    );
    assert.equal(final, 'SUCCESS', agent.logs());
    const client = new pg.Client({ connectionString: warehouse.url });
    await client.connect();
    try {
      const { rows } = await client.query(
        'SELECT count(*)::int AS n, sum(orders)::int AS orders FROM "sales mart".mart_sales_by_customer',
      );
      assert.deepEqual(rows[0], { n: 200, orders: 4286 });
    } finally {
      await client.end();
    }
    // The rows each step's statements wrote, as PostgreSQL counted them (consumption's rowsWritten): the mart's 200 among them.
    const written = await server.db.selectFrom('executionSteps').select('rowsWritten').where('executionId', '=', id).execute();
    assert.ok(
      written.some((step) => step.rowsWritten !== null && Number(step.rowsWritten) === 200),
      JSON.stringify(written),
    );
    // The password went to the agent sealed for it (E15); the server keeps it nowhere in plain text.
    const work = await server.db.selectFrom('agentWork').select('payload').execute();
    assert.ok(work.length > 0);
    for (const row of work) assert.doesNotMatch(String(row.payload), /pg-password-never-on-the-server/);
  });

  test('a cancel mid-statement cancels it in PostgreSQL and the run ends CANCELLED', async () => {
    const id = await start('pipelines/sleep');
    const client = new pg.Client({ connectionString: warehouse.url });
    await client.connect();
    try {
      const sleeping = () =>
        client
          .query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(120)' AND state = 'active'")
          .then((answer) => answer.rows[0].n as number);
      await eventually(sleeping, (n) => n === 1, 30_000);
      const cancelled = await server.api('PATCH', `/projects/${projectId}/pipeline-executions/${id}`, {
        token: caller.token,
        body: { forceUpdate: false, status: 'CANCELLED' },
      });
      assert.equal(cancelled.status, 200, cancelled.text);
      assert.equal(
        await eventually(
          () => status(id),
          (s) => s === 'CANCELLED',
          30_000,
        ),
        'CANCELLED',
      );
      assert.equal(await eventually(sleeping, (n) => n === 0, 10_000), 0);
    } finally {
      await client.end();
    }
  });
});
