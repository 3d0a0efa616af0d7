import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';
import { scratchWarehouse, type ScratchWarehouse } from '../helpers/warehouses.ts';
import { environmentSchema } from '../../src/agent/warehouse/index.ts';

const EXAMPLES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/pipelines');
const examples = Object.fromEntries(
  readdirSync(EXAMPLES).map((name) => [`pipelines/${name}`, readFileSync(path.join(EXAMPLES, name), 'utf8')]),
);

/**
 * An environment without a default agent runs on the account's platform-hosted agent, which the server
 * process runs itself (a `dpc agent run` child taking work from the same queue). Scripts are off there.
 * On PostgreSQL the hosted warehouse is DPC_HOSTED_WAREHOUSE_URL, a schema per account and environment.
 */
describeEachStore('the platform-hosted agent', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let warehouse: ScratchWarehouse | undefined;
  let environmentId: string;
  const accountIds: string[] = [];

  before(async () => {
    if (kind === 'postgres') warehouse = await scratchWarehouse('postgres');
    server = await TestServer.start(kind, { ...(warehouse && { hostedWarehouseUrl: warehouse.url }) });
    caller = await server.newAccount();
    accountIds.push(caller.accountId);
    projectId = await server.newProject(caller);
    const created = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'dev' },
    });
    assert.equal(created.status, 201, created.text);
    // The API names environments by name; the warehouse schema is named by the id (as the run's payload carries it).
    ({ id: environmentId } = await server.db
      .selectFrom('environments')
      .select('id')
      .where('projectId', '=', projectId)
      .executeTakeFirstOrThrow());
    await uploadVersion(server, caller, projectId, 'dev', 'v1', {
      ...examples,
      'pipelines/read-files.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Read"]
    Read:
      type: "sql-executor"
      parameters:
        sqlScript: "CREATE TABLE stolen AS SELECT * FROM read_text('/etc/hostname')"
`),
      'pipelines/script.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Script"]
    Script:
      type: "bash-script"
      parameters:
        script: "echo hello"
`),
    });
  });
  after(async () => {
    await server.close();
    await warehouse?.drop();
    // Roles belong to the PostgreSQL server, not the database: the accounts' roles go too.
    if (warehouse) {
      const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
      await admin.connect();
      try {
        for (const accountId of accountIds) {
          const { rows } = await admin.query('SELECT rolname FROM pg_roles WHERE rolname LIKE $1', [
            `${environmentSchema(accountId, '')}%`,
          ]);
          for (const { rolname } of rows) await admin.query(`DROP ROLE "${rolname}"`);
        }
      } finally {
        await admin.end();
      }
    }
  });

  const start = async (pipelineName: string) => {
    const answer = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'dev', pipelineName },
    });
    assert.equal(answer.status, 201, answer.text);
    return answer.body.pipelineExecutionId as string;
  };
  const finished = (id: string) =>
    eventually(
      async () =>
        (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token: caller.token })).body.status,
      (status) => status !== 'RUNNING',
      180_000,
    );
  const steps = async (id: string) =>
    (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps?size=100`, { token: caller.token })).body
      .results as { name: string; result: { status: string; message?: string } }[];

  test('an environment without a default agent runs on the hosted agent, in the hosted warehouse', async () => {
    const id = await start('pipelines/load-orders');
    assert.equal(await finished(id), 'SUCCESS', JSON.stringify(await steps(id)));
    assert.equal((await steps(id)).find((step) => step.name === 'Count mart rows')!.result.message, 'mart_rows=200');
    const agents = (await server.api('GET', '/agents', { token: caller.token })).body.results as {
      name: string;
      agentType: string;
    }[];
    assert.deepEqual(
      agents.map((agent) => [agent.name, agent.agentType]),
      [['platform-hosted', 'PLATFORM_HOSTED']],
    );
    if (warehouse) {
      // The mart is in the account's environment schema of the operator's warehouse database.
      const client = new pg.Client({ connectionString: warehouse.url });
      await client.connect();
      try {
        const { rows } = await client.query(
          "SELECT table_schema FROM information_schema.tables WHERE table_name = 'mart_sales_by_customer'",
        );
        assert.equal(rows.length, 1);
        assert.match(rows[0].table_schema, new RegExp(`^dpc_${caller.accountId.replace(/-/g, '_')}_`));
      } finally {
        await client.end();
      }
    }
  });

  // The embedded DuckDB warehouse is the hosted one where the server runs on SQLite; on PostgreSQL
  // deployments the hosted warehouse is the operator's PostgreSQL database (docs/warehouses.md).
  if (kind === 'sqlite') {
    test('the hosted embedded warehouse has no file system access from SQL', async () => {
      const id = await start('pipelines/read-files');
      assert.equal(await finished(id), 'FAILED');
      assert.match(
        (await steps(id)).find((step) => step.name === 'Read')!.result.message!,
        /file system operations are disabled/,
      );
    });
  }

  if (kind === 'postgres') {
    test("accounts apart in the hosted PostgreSQL warehouse: another account's schema is permission denied", async () => {
      // This account's environment schema holds a table; the schema and the table are its role's.
      const own = await start('pipelines/load-orders');
      assert.equal(await finished(own), 'SUCCESS', JSON.stringify(await steps(own)));
      const schema = environmentSchema(caller.accountId, environmentId);
      const client = new pg.Client({ connectionString: warehouse!.url });
      await client.connect();
      try {
        const { rows } = await client.query(
          `SELECT pg_get_userbyid(n.nspowner) AS schema_owner, t.tableowner FROM pg_namespace n
            JOIN pg_tables t ON t.schemaname = n.nspname WHERE n.nspname = $1 AND t.tablename = 'mart_sales_by_customer'`,
          [schema],
        );
        assert.deepEqual(rows, [{ schema_owner: schema, tableowner: schema }]);
      } finally {
        await client.end();
      }

      // Another account's pipeline reads it, directly and after trying to shed its role: refused by PostgreSQL.
      const other = await server.newAccount();
      accountIds.push(other.accountId);
      const otherProject = await server.newProject(other);
      const environment = await server.api('POST', `/projects/${otherProject}/environments`, {
        token: other.token,
        body: { name: 'dev' },
      });
      assert.equal(environment.status, 201, environment.text);
      const reading = (sql: string) =>
        orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Read"]
    Read:
      type: "sql-executor"
      parameters:
        sqlScript: ${JSON.stringify(sql)}
`);
      const target = `"${schema}".mart_sales_by_customer`;
      await uploadVersion(server, other, otherProject, 'dev', 'v1', {
        'read.orch.yaml': reading(`CREATE TABLE copied AS SELECT * FROM ${target}`),
        'escape.orch.yaml': reading(
          `RESET ROLE; SET SESSION AUTHORIZATION DEFAULT; CREATE TABLE copied AS SELECT * FROM ${target}`,
        ),
        'become.orch.yaml': reading(`SET ROLE "${schema}"`),
        'own.orch.yaml': reading('CREATE TABLE mine AS SELECT 1 AS x'),
      });
      const run = async (pipelineName: string) => {
        const answer = await server.api('POST', `/projects/${otherProject}/pipeline-executions`, {
          token: other.token,
          body: { environmentName: 'dev', pipelineName },
        });
        assert.equal(answer.status, 201, answer.text);
        const id = answer.body.pipelineExecutionId as string;
        const status = await eventually(
          async () =>
            (await server.api('GET', `/projects/${otherProject}/pipeline-executions/${id}/status`, { token: other.token })).body
              .status,
          (value) => value !== 'RUNNING',
          180_000,
        );
        const list = (
          await server.api('GET', `/projects/${otherProject}/pipeline-executions/${id}/steps?size=100`, { token: other.token })
        ).body.results as { name: string; result: { message?: string } }[];
        return { status, message: list.find((step) => step.name === 'Read')?.result.message ?? '' };
      };
      assert.deepEqual(await run('read'), { status: 'FAILED', message: `permission denied for schema ${schema}` });
      const escaped = await run('escape');
      assert.equal(escaped.status, 'FAILED');
      assert.match(escaped.message, /permission denied/);
      const became = await run('become');
      assert.equal(became.status, 'FAILED');
      assert.match(became.message, /permission denied to set role/);
      // Its own schema works as ever.
      assert.equal((await run('own')).status, 'SUCCESS');
    });
  }

  test('scripts are off on the hosted agent', async () => {
    const id = await start('pipelines/script');
    assert.equal(await finished(id), 'FAILED');
    assert.match((await steps(id)).find((step) => step.name === 'Script')!.result.message!, /scripts are not allowed/);
  });

  test("a deleted hosted agent's process is stopped; the next run gets a new hosted agent and a process of its own", async () => {
    const running = (server.server.app.hostedAgents as unknown as { running: Map<string, { exitCode: number | null }> }).running;
    const agents = (await server.api('GET', '/agents?type=PLATFORM_HOSTED', { token: caller.token })).body.results;
    assert.equal(agents.length, 1);
    const child = running.get(agents[0].agentId);
    assert.ok(child, 'the hosted agent runs here');
    assert.equal((await server.api('DELETE', `/agents/${agents[0].agentId}`, { token: caller.token })).status, 202);
    await eventually(
      async () => running.has(agents[0].agentId),
      (still) => !still,
      20_000,
    );
    const id = await start('pipelines/load-orders');
    assert.equal(await finished(id), 'SUCCESS');
  });
});

describeEachStore('without the platform-hosted agent (DPC_HOSTED_AGENT=false)', (kind) => {
  let server: TestServer;
  after(async () => server.close());
  test('an environment without a default agent must name one: 400', async () => {
    server = await TestServer.start(kind, { hostedAgent: false });
    const caller = await server.newAccount();
    const projectId = await server.newProject(caller);
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
    await uploadVersion(server, caller, projectId, 'dev', 'v1', examples);
    const answer = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'dev', pipelineName: 'pipelines/load-orders' },
    });
    const problem = expectProblem(answer, 400);
    assert.deepEqual(problem.violations, ['agentId: required, the environment has no default agent']);
  });
});
