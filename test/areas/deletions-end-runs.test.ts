import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';

/** start → wait 4 s → a step that writes `file` (so that a run that goes on is seen). */
const marking = (file: string) =>
  orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Wait"]
    Wait:
      type: "wait"
      parameters:
        seconds: "4"
      transitions:
        success: ["Mark"]
    Mark:
      type: "sql-executor"
      parameters:
        sqlScript: "COPY (SELECT 1 AS v) TO '${file}' (HEADER)"
`);

/**
 * Deleting what a run in progress belongs to ends the run (attack findings 5 and 9): an agent deleted while it
 * runs one leaves it CANCELLED at once (not UNKNOWN for ever, its executionTag free again); a run whose work is
 * gone (as an agent deleted before this rule left it) is ended by the sweep; a project deleted while its run
 * is on a real agent process has the agent told to stop, so the run's remaining steps do not run.
 */
describeEachStore('deletions end the runs in progress', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let folder: string;
  const agents: Awaited<ReturnType<typeof spawnAgent>>[] = [];

  before(async () => {
    server = await TestServer.start(kind, {
      agentConnectedWindowSeconds: 3,
      executionLostAfterMs: 2000,
      schedulerIntervalMs: 200,
    });
    caller = await server.newAccount();
    folder = mkdtempSync(path.join(tmpdir(), 'dpc-deletions-'));
  });
  after(async () => {
    for (const agent of agents) {
      agent.child.kill('SIGKILL');
      await agent.exited;
    }
    await server.close();
    rmSync(folder, { recursive: true, force: true });
  });

  /** A project with environment `prod` and `pipelines/mark` writing `file`, and a customer agent (credentials). */
  async function setUp(file: string) {
    const projectId = await server.newProject(caller);
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: {
        name: `runner-${Math.random().toString(36).slice(2)}`,
        agentType: 'CUSTOMER_HOSTED',
        cloudProvider: 'aws',
        deployment: 'fargate',
      },
    });
    assert.equal(created.status, 201, created.text);
    const agentId = created.body.agentId as string;
    const credentials = (await server.api('POST', `/agents/${agentId}/credentials`, { token: caller.token })).body;
    assert.equal(
      (await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'prod' } })).status,
      201,
    );
    await uploadVersion(server, caller, projectId, 'prod', 'v1', { 'pipelines/mark.orch.yaml': marking(file) });
    return { projectId, agentId, credentials };
  }
  const start = (projectId: string, body: Record<string, unknown>) =>
    server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'prod', pipelineName: 'pipelines/mark', ...body },
    });
  const runOf = async (projectId: string, id: string) =>
    (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}`, { token: caller.token })).body;
  /** Waits until run `id` reports its step `name`. */
  const stepStarted = (projectId: string, id: string, name: string) =>
    eventually(
      async () =>
        (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps`, { token: caller.token })).body.results,
      (steps: { name: string }[]) => steps.some((step) => step.name === name),
    );

  test('an agent deleted during a run: the run is CANCELLED at once, saying so, and its executionTag is free', async () => {
    const { projectId, agentId, credentials } = await setUp(path.join(folder, 'agent.csv'));
    agents.push(await spawnAgent({ url: server.url, ...credentials, stateDir: path.join(folder, 'agent') }));
    const started = await start(projectId, { agentId, executionTag: 'deltag' });
    assert.equal(started.status, 201, started.text);
    const id = started.body.pipelineExecutionId;
    await stepStarted(projectId, id, 'Wait');
    assert.equal((await server.api('DELETE', `/agents/${agentId}`, { token: caller.token })).status, 202);
    const run = await runOf(projectId, id);
    assert.equal(run.status, 'CANCELLED', JSON.stringify(run));
    assert.match(run.message, /agent .*was deleted/);
    // The sweep leaves it so (no lost contact, no UNKNOWN).
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assert.equal((await runOf(projectId, id)).status, 'CANCELLED');
    // The tag is free: a new run with it starts (on the account's hosted agent).
    const again = await start(projectId, { executionTag: 'deltag' });
    assert.equal(again.status, 201, again.text);
    assert.equal(
      (
        await server.api('PATCH', `/projects/${projectId}/pipeline-executions/${again.body.pipelineExecutionId}`, {
          token: caller.token,
          body: { status: 'CANCELLED', forceUpdate: true },
        })
      ).status,
      200,
    );
  });

  test('a run whose agent work is gone is ended by the sweep, not left UNKNOWN', async () => {
    const { projectId, agentId } = await setUp(path.join(folder, 'gone.csv'));
    const started = await start(projectId, { agentId });
    assert.equal(started.status, 201, started.text);
    const id = started.body.pipelineExecutionId;
    // As an agent deleted before deletions ended its runs left it: the run names work that no longer exists.
    const row = await server.db.selectFrom('executions').select('agentWorkId').where('id', '=', id).executeTakeFirstOrThrow();
    await server.db.deleteFrom('agentWork').where('id', '=', row.agentWorkId!).execute();
    const run = await eventually(
      () => runOf(projectId, id),
      (value) => value.status === 'CANCELLED',
      15_000,
    );
    assert.equal(run.status, 'CANCELLED', JSON.stringify(run));
    assert.match(run.message, /agent .*was deleted/);
  });

  test("a deleted agent's process gives up once its credentials are refused for long, and exits non-zero (attack finding 10)", async () => {
    const { agentId, credentials } = await setUp(path.join(folder, 'unused.csv'));
    const agent = await spawnAgent(
      { url: server.url, ...credentials, stateDir: path.join(folder, 'deleted') },
      { DPC_AGENT_GIVE_UP_AFTER_REFUSED_SECONDS: '2' },
    );
    agents.push(agent);
    assert.equal((await server.api('DELETE', `/agents/${agentId}`, { token: caller.token })).status, 202);
    const code = await Promise.race([agent.exited, new Promise((resolve) => setTimeout(() => resolve('still running'), 20_000))]);
    assert.equal(code, 4, agent.logs());
    assert.match(agent.logs(), /"msg":"giving up: the server refuses the agent credentials"/);
    // It stopped asking: a few refusals, not one every few seconds for ever.
    const asked = (agent.logs().match(/refused the agent credentials \(401\)/g) ?? []).length;
    assert.ok(asked <= 20, `${asked} refused token requests logged`);
  });

  test("a project deleted during a run: the agent is told to stop and the run's next step does not run", async () => {
    const file = path.join(folder, 'project.csv');
    const { projectId, agentId, credentials } = await setUp(file);
    const agent = await spawnAgent({ url: server.url, ...credentials, stateDir: path.join(folder, 'project') });
    agents.push(agent);
    const started = await start(projectId, { agentId });
    assert.equal(started.status, 201, started.text);
    const id = started.body.pipelineExecutionId;
    await stepStarted(projectId, id, 'Wait');
    assert.equal((await server.api('DELETE', `/projects/${projectId}`, { token: caller.token })).status, 204);
    // The wait (4 s) ends and the Mark step would run: it does not.
    await new Promise((resolve) => setTimeout(resolve, 6000));
    assert.equal(existsSync(file), false, `the run went on after its project was deleted:\n${agent.logs()}`);
    const work = await server.db.selectFrom('agentWork').select(['state']).where('agentId', '=', agentId).execute();
    assert.deepEqual(
      work.map((row) => row.state),
      ['failed'],
      'the agent stopped the work and reported its end',
    );
  });
});
