import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';
import { scratchWarehouse, type ScratchWarehouse } from '../helpers/warehouses.ts';

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

  before(async () => {
    if (kind === 'postgres') warehouse = await scratchWarehouse('postgres');
    server = await TestServer.start(kind, { ...(warehouse && { hostedWarehouseUrl: warehouse.url }) });
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const created = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'dev' },
    });
    assert.equal(created.status, 201, created.text);
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

  test('scripts are off on the hosted agent', async () => {
    const id = await start('pipelines/script');
    assert.equal(await finished(id), 'FAILED');
    assert.match((await steps(id)).find((step) => step.name === 'Script')!.result.message!, /scripts are not allowed/);
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
