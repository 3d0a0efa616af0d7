/**
 * The README's first pipeline, as a user runs it: a server and a reference agent as processes, the
 * examples/ project published with `dpc publish`, its pipeline run through the API and followed to
 * SUCCESS, the mart's row count read from the run's steps, the example's test pipeline passing on it.
 * The warehouse is the agent's embedded DuckDB: nothing else is installed.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { describeEachStore, scratchStore } from './helpers/harness.ts';
import { runDpc, spawnAgent, spawnServe } from './helpers/processes.ts';
import { assertRunEvent } from './helpers/openlineage.ts';

const EXAMPLES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../examples');

/**
 * fetch, once more when the connection it reused was closed under it: `dpc` runs synchronously here
 * (spawnSync), so a kept-alive socket can outlive the server's keep-alive while this process is blocked.
 */
async function fetchAgain(url: string, init?: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (error) {
    if ((error as { cause?: { code?: string } }).cause?.code !== 'UND_ERR_SOCKET') throw error;
    return fetch(url, init);
  }
}

async function tokenOf(url: string, clientId: string, clientSecret: string): Promise<string> {
  const answer = await fetchAgain(`${url}/oauth/dpc/token`, {
    method: 'POST',
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
  });
  return ((await answer.json()) as { access_token: string }).access_token;
}

describeEachStore('the first pipeline of the README', (kind) => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  const stops: (() => void)[] = [];
  let stateDir: string;
  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-example-agent-'));
    env = {
      DPC_DATA_DIR: scratch.settings.dataDir ?? '',
      DATABASE_URL: scratch.settings.databaseUrl ?? '',
      DPC_ENCRYPTION_KEYS: Buffer.alloc(32, 9).toString('base64'),
    };
  });
  after(async () => {
    for (const stop of stops) stop();
    rmSync(stateDir, { recursive: true, force: true });
    await drop();
  });

  test('publish examples/, run load-orders to SUCCESS, read the mart row count, pass the test pipeline', async () => {
    const admin = JSON.parse(runDpc(['accounts', 'create', '--name', 'Examples'], env).stdout);
    const server = await spawnServe(env);
    stops.push(() => server.child.kill('SIGKILL'));
    const client = { ...env, DPC_URL: server.url, DPC_CLIENT_ID: admin.clientId, DPC_CLIENT_SECRET: admin.clientSecret };
    const api = (method: string, apiPath: string, data?: unknown) => {
      const answer = runDpc(['api', method, apiPath, ...(data === undefined ? [] : ['--data', JSON.stringify(data)])], client);
      assert.equal(answer.status, 0, `${method} ${apiPath}: ${answer.stdout} ${answer.stderr}`);
      return answer.stdout.trim() ? JSON.parse(answer.stdout) : undefined;
    };

    const { agentId } = api('POST', '/v1/agents', {
      name: 'laptop',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'fargate',
    });
    const credentials = api('GET', `/v1/agents/${agentId}/credentials`);
    const agent = await spawnAgent({
      url: server.url,
      clientId: credentials.clientId,
      clientSecret: credentials.clientSecret,
      stateDir,
    });
    stops.push(() => agent.child.kill('SIGKILL'));
    const { projectId } = api('POST', '/v1/projects', { name: 'examples' });
    api('POST', `/v1/projects/${projectId}/environments`, { name: 'dev', defaultAgentId: agentId });
    const published = runDpc(['publish', EXAMPLES, '--project', projectId, '--environment', 'dev', '--version', '1'], client);
    assert.equal(published.status, 0, published.stderr);

    const run = async (body: Record<string, unknown>, kindPath: string) => {
      const { [kindPath === 'pipeline-executions' ? 'pipelineExecutionId' : 'testExecutionId']: id } = api(
        'POST',
        `/v1/projects/${projectId}/${kindPath}`,
        body,
      );
      // Followed as a script would, but without a process per look: the same API, one token.
      const token = await tokenOf(server.url, admin.clientId, admin.clientSecret);
      for (let i = 0; i < 1200; i += 1) {
        const look = await fetchAgain(
          `${server.url}/dpc/v1/projects/${projectId}/${kindPath}/${id}${kindPath === 'pipeline-executions' ? '/status' : ''}`,
          { headers: { authorization: `Bearer ${token}` } },
        );
        const { status } = (await look.json()) as { status: string };
        if (!['RUNNING', 'QUEUED', 'CANCELLING', 'UNKNOWN'].includes(status)) return { id, status };
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      throw new Error(`the run did not finish: ${agent.logs()}`);
    };

    const loaded = await run({ pipelineName: 'pipelines/load-orders', environmentName: 'dev' }, 'pipeline-executions');
    const steps = api('GET', `/v1/projects/${projectId}/pipeline-executions/${loaded.id}/steps?size=100`).results as {
      name: string;
      result: { status: string; message?: string };
    }[];
    assert.equal(loaded.status, 'SUCCESS', JSON.stringify(steps));
    assert.deepEqual(
      steps.map((step) => step.name),
      ['Start', 'Load raw data', 'Build mart', 'Write mart', 'Count mart rows', 'End Success'],
    );
    assert.equal(steps.find((step) => step.name === 'Count mart rows')!.result.message, 'mart_rows=200');
    // The mart is in the agent's embedded warehouse: one DuckDB file for the account and environment.
    assert.match(agent.logs(), /"agent running"/);

    // Lineage: the load's SQL and the transformation's output, as a catalogue reads them.
    const since = new Date(Date.now() - 3_600_000).toISOString();
    const lineage = api('GET', `/v1/lineage/events?generatedFrom=${since}&size=100`).results as {
      event: {
        eventType: string;
        run: { runId: string; facets?: { parent?: { run: { runId: string }; job: { name: string } } } };
        job: { name: string };
        inputs: { name: string }[];
        outputs: {
          name: string;
          facets?: { columnLineage?: { fields: Record<string, { inputFields: { name: string; field: string }[] }> } };
        }[];
      };
    }[];
    // The run is one OpenLineage run (START, its steps' datasets, COMPLETE); the transformation it runs ("Build
    // mart", run-transformation) is a run of its own, whose parent run facet names the load's run and job.
    const child = lineage.find((item) => item.event.run.facets?.parent?.run.runId === loaded.id)?.event.run.runId;
    assert.ok(child, JSON.stringify(lineage.map((item) => item.event.run)));
    const ofRun = lineage.filter((item) => [loaded.id, child].includes(item.event.run.runId));
    for (const item of ofRun) assertRunEvent(item.event);
    assert.deepEqual(
      ofRun
        .filter((item) => item.event.eventType !== 'RUNNING')
        .map((item) => [item.event.eventType, item.event.run.runId === child ? 'child' : 'run', item.event.job.name]),
      [
        ['START', 'run', 'pipelines/load-orders.orch.yaml'],
        ['START', 'child', 'pipelines/sales-mart.tran.yaml'],
        ['COMPLETE', 'child', 'pipelines/sales-mart.tran.yaml'],
        ['COMPLETE', 'run', 'pipelines/load-orders.orch.yaml'],
      ],
    );
    const mart = ofRun.find((item) => item.event.outputs.some((output) => output.name.endsWith('.mart_sales_by_customer')));
    assert.ok(mart, JSON.stringify(ofRun.map((item) => item.event.outputs)));
    assert.equal(mart.event.run.runId, child, "the mart's step is of the transformation's run");
    assert.equal(mart.event.job.name, 'pipelines/sales-mart.tran.yaml');
    assert.deepEqual(mart.event.inputs.map((input) => input.name.split('.').pop()).sort(), ['raw_customers', 'raw_orders']);
    assert.ok(ofRun.some((item) => item.event.outputs.some((output) => output.name.endsWith('.raw_orders'))));
    // Column lineage, traced through filter, join, aggregate and rename: each mart column's input columns.
    const columns = mart.event.outputs.find((output) => output.name.endsWith('.mart_sales_by_customer'))!.facets?.columnLineage
      ?.fields;
    assert.ok(columns, 'the mart has a columnLineage facet');
    const from = (column: string) => columns[column]?.inputFields.map((input) => `${input.name.split('.').pop()}.${input.field}`);
    assert.deepEqual(
      Object.fromEntries(['customer_id', 'customer_name', 'region', 'revenue', 'orders'].map((c) => [c, from(c)])),
      {
        customer_id: ['raw_customers.customer_id'],
        customer_name: ['raw_customers.customer_name'],
        region: ['raw_customers.region'],
        revenue: ['raw_orders.amount'],
        orders: ['raw_orders.amount'],
      },
    );

    const tested = await run({ environmentName: 'dev', scope: 'PROJECT' }, 'test-executions');
    assert.equal(tested.status, 'SUCCESS');

    // The SQL of the transformation, as the agent ran it.
    const sql = runDpc(
      ['pipeline', 'sql', path.join(EXAMPLES, 'pipelines/sales-mart.tran.yaml'), '--project', projectId, '--environment', 'dev'],
      client,
    );
    assert.equal(sql.status, 0, sql.stderr);
    assert.match(
      sql.stdout,
      /^-- Write mart \(rewrite-table\)\nCREATE OR REPLACE TABLE "mart_sales_by_customer" AS WITH "Orders" AS/,
    );
  });
});
