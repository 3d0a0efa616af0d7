import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';

/**
 * "Rows written where known": the reference agent (a process) runs SQL on the embedded warehouse
 * (DuckDB), reports the rows each step's statements wrote (CREATE TABLE AS among them), and `GET /v1/consumption` sums them per group.
 * A step whose SQL tells no count (DDL) reports none, and a day of such runs answers null (not known).
 */
describeEachStore('consumption: rows written, from a real agent run', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let stateDir: string;
  let agent: Awaited<ReturnType<typeof spawnAgent>>;

  before(async () => {
    server = await TestServer.start(kind, { agentConnectedWindowSeconds: 3 });
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
    const environment = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'dev', defaultAgentId: agentId },
    });
    assert.equal(environment.status, 201, environment.text);
    const sqlStep = (name: string, next: string | undefined, script: string) =>
      `    ${name}:
      type: "sql-executor"
      parameters:
        sqlScript: "${script}"
${next ? `      transitions:\n        success: ["${next}"]\n` : ''}`;
    await uploadVersion(server, caller, projectId, 'dev', 'v1', {
      // 7 rows inserted by one step, 2 updated and 1 deleted by another, the 6 left copied by CREATE TABLE AS: 16 rows written.
      'pipelines/load.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Create"]
${sqlStep('Create', 'Insert', 'CREATE TABLE IF NOT EXISTS numbers (n INTEGER)')}${sqlStep(
        'Insert',
        'Change',
        'INSERT INTO numbers SELECT range FROM range(7)',
      )}${sqlStep('Change', 'Copy', 'UPDATE numbers SET n = n + 100 WHERE n < 2; DELETE FROM numbers WHERE n = 6')}${sqlStep(
        'Copy',
        undefined,
        'CREATE OR REPLACE TABLE copies AS SELECT * FROM numbers',
      )}`),
      // DDL only: no count is known.
      'pipelines/ddl.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Create"]
${sqlStep('Create', undefined, 'CREATE TABLE IF NOT EXISTS other (n INTEGER)')}`),
    });
  });
  after(async () => {
    agent?.child.kill('SIGKILL');
    await agent?.exited;
    await server.close();
    rmSync(stateDir, { recursive: true, force: true });
  });

  const run = async (pipelineName: string) => {
    const answer = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'dev', pipelineName, versionName: 'v1' },
    });
    assert.equal(answer.status, 201, answer.text);
    const id = answer.body.pipelineExecutionId as string;
    const final = await eventually(
      async () =>
        (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token: caller.token })).body.status,
      (status) => status !== 'RUNNING' && status !== 'QUEUED',
      60_000,
    );
    assert.equal(final, 'SUCCESS', agent.logs());
    return id;
  };

  test('the rows a run of sql-executor steps wrote are summed per pipeline; DDL alone answers null', async () => {
    const loaded = await run('pipelines/load.orch.yaml');
    await run('pipelines/ddl.orch.yaml');
    // What the agent reported, step by step, as the server recorded it.
    const steps = await server.db
      .selectFrom('executionSteps')
      .select(['name', 'rowsWritten'])
      .where('executionId', '=', loaded)
      .orderBy('position')
      .execute();
    assert.deepEqual(
      steps.map((step) => [step.name, step.rowsWritten === null ? null : Number(step.rowsWritten)]),
      [
        ['Start', null],
        ['Create', null],
        ['Insert', 7],
        ['Change', 3],
        ['Copy', 6],
      ],
    );
    // The steps API answers them too.
    const listed = await server.api('GET', `/projects/${projectId}/pipeline-executions/${loaded}/steps`, { token: caller.token });
    assert.equal(listed.status, 200, listed.text);
    assert.deepEqual(
      listed.body.results.map((step: any) => [step.name, step.result.rowsWritten]),
      [
        ['Start', null],
        ['Create', null],
        ['Insert', 7],
        ['Change', 3],
        ['Copy', 6],
      ],
    );
    const today = new Date().toISOString().slice(0, 10);
    const answer = await server.api('GET', `/consumption?from=${today}&to=${today}&groupBy=pipeline`, { token: caller.token });
    assert.equal(answer.status, 200, answer.text);
    const byPipeline = Object.fromEntries(answer.body.results.map((row: any) => [row.pipelineName, row]));
    assert.equal(byPipeline['pipelines/load.orch.yaml'].rowsWritten, 16);
    assert.equal(byPipeline['pipelines/ddl.orch.yaml'].rowsWritten, null);
    assert.equal(answer.body.totals.rowsWritten, 16);

    // A second run of the same pipeline adds its rows to the day's: 7 + 2 updated + 1 deleted (its own 6),
    // and the copy of the 12 numbers now held.
    await run('pipelines/load.orch.yaml');
    const again = await server.api('GET', `/consumption?from=${today}&to=${today}`, { token: caller.token });
    assert.equal(again.body.results[0].rowsWritten, 16 + 22);
    assert.equal(again.body.results[0].runs, 3);
  });

  test("another account's runs are not read, and sums past 2^63 answer (not a 500)", async () => {
    // Account B's run, with 1,100 steps each reporting the largest row count a step may (2^53 - 1).
    const other = await server.newAccount();
    const model = await server.db
      .selectFrom('executions')
      .selectAll()
      .where('accountId', '=', caller.accountId)
      .executeTakeFirstOrThrow();
    const runId = crypto.randomUUID();
    await server.db
      .insertInto('executions')
      .values({ ...model, id: runId, accountId: other.accountId, executionTag: null })
      .execute();
    const steps = Array.from({ length: 1100 }, (_, position) => ({
      executionId: runId,
      position,
      name: `step ${position}`,
      status: 'SUCCESS',
      startedAt: model.startedAt,
      finishedAt: model.finishedAt,
      message: null,
      childPipeline: null,
      rowsWritten: Number.MAX_SAFE_INTEGER,
    }));
    for (let i = 0; i < steps.length; i += 100)
      await server.db
        .insertInto('executionSteps')
        .values(steps.slice(i, i + 100))
        .execute();
    const day = model.startedAt.slice(0, 10);
    const mine = await server.api('GET', `/consumption?from=${day}&to=${day}`, { token: caller.token });
    assert.equal(mine.status, 200, mine.text);
    assert.equal(mine.body.totals.rowsWritten, 16 + 22, "another account's rows were counted");
    const theirs = await server.api('GET', `/consumption?from=${day}&to=${day}`, { token: other.token });
    assert.equal(theirs.status, 200, theirs.text);
    assert.ok(theirs.body.totals.rowsWritten > 2 ** 63, String(theirs.body.totals.rowsWritten));
  });
});
