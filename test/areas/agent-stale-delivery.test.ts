import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';

/**
 * An agent (a real `dpc agent run` process) is paused while it runs a step; the work's lease lapses, another
 * agent process of the same agent takes the work again (delivery 2) and the run ends FAILED "not run a second
 * time". When the paused process goes on, the server tells it (409 to its report, and its heartbeat's
 * `endedWork`) that its delivery is no longer its to run: it stops there, runs no further step (the next one
 * would write a file) and does not keep sending refused reports.
 */
describeEachStore('a delivery the server has ended', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let folder: string;
  let credentials: { clientId: string; clientSecret: string };
  const agents: Awaited<ReturnType<typeof spawnAgent>>[] = [];

  before(async () => {
    server = await TestServer.start(kind, { agentConnectedWindowSeconds: 3, agentWorkLeaseSeconds: 2 });
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'runner', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' },
    });
    assert.equal(created.status, 201, created.text);
    credentials = (await server.api('POST', `/agents/${created.body.agentId}/credentials`, { token: caller.token })).body;
    await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: created.body.agentId },
    });
    folder = mkdtempSync(path.join(tmpdir(), 'dpc-stale-'));
    const marked = path.join(folder, 'marked.csv');
    await uploadVersion(server, caller, projectId, 'prod', 'v1', {
      'mark.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Wait"]
    Wait:
      type: "wait"
      parameters:
        seconds: "3"
      transitions:
        success: ["Mark"]
    Mark:
      type: "sql-executor"
      parameters:
        sqlScript: "COPY (SELECT 1 AS v) TO '${marked}' (HEADER)"
`),
    });
  });
  after(async () => {
    for (const agent of agents) {
      agent.child.kill('SIGCONT');
      agent.child.kill('SIGKILL');
      await agent.exited;
    }
    await server.close();
    rmSync(folder, { recursive: true, force: true });
  });

  test('the paused process stops its stale delivery: no further step, no stream of refused reports', async () => {
    const first = await spawnAgent({ url: server.url, ...credentials, stateDir: path.join(folder, 'a') });
    agents.push(first);
    const started = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'prod', pipelineName: 'mark' },
    });
    assert.equal(started.status, 201, started.text);
    const id = started.body.pipelineExecutionId;
    const steps = async () =>
      (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps?size=100`, { token: caller.token })).body
        .results as { name: string; result: { status: string } }[];
    await eventually(steps, (list) => list.some((step) => step.name === 'Wait' && step.result.status === 'RUNNING'));

    // Partitioned: its lease lapses, and another process of the agent takes the work again.
    first.child.kill('SIGSTOP');
    await new Promise((resolve) => setTimeout(resolve, 3000));
    agents.push(await spawnAgent({ url: server.url, ...credentials, stateDir: path.join(folder, 'b') }));
    const run = await eventually(
      async () => (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}`, { token: caller.token })).body,
      (value) => value.status === 'FAILED',
    );
    assert.equal(run.status, 'FAILED', JSON.stringify(run));
    assert.match(run.message, /not run a second time/);

    // Back: its wait is over at once, and its next step would write the file.
    first.child.kill('SIGCONT');
    const logs = await eventually(
      async () => first.logs(),
      (text) => text.includes('"msg":"the server ended this delivery; stopping it"'),
    );
    // Time for a step that was not stopped to run (and for refused reports to pile up).
    await new Promise((resolve) => setTimeout(resolve, 3000));
    assert.equal(existsSync(path.join(folder, 'marked.csv')), false, `the stale delivery ran its next step:\n${first.logs()}`);
    assert.match(logs, /"msg":"the server ended this delivery; stopping it"/, logs);
    // One refused report per delivery it held at most (it may have taken delivery 2 itself, with a poll
    // answered while it was paused): never a stream of them.
    const refused = first.logs().match(/"msg":"report not taken"/g) ?? [];
    assert.ok(refused.length <= 4, `${refused.length} refused reports:\n${first.logs()}`);
    // The run stays as the second delivery ended it.
    const after = (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}`, { token: caller.token })).body;
    assert.equal(after.status, 'FAILED');
  });
});
