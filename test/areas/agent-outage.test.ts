import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { eventually, uploadVersion, WAITING } from '../helpers/executions.ts';

/**
 * The server goes away while the reference agent (a real `dpc agent run` process) is in a run, and comes
 * back on the same address before the work's lease ends: the agent keeps sending the report it could not
 * deliver, and the run ends as it really ended, not FAILED as "not run a second time" (issue 36).
 */
describeEachStore('a server outage shorter than the lease', (kind) => {
  let server: TestServer;
  let restarted: TestServer | undefined;
  let caller: Caller;
  let projectId: string;
  let stateDir: string;
  let agent: Awaited<ReturnType<typeof spawnAgent>> | undefined;

  before(async () => {
    server = await TestServer.start(kind, {
      agentConnectedWindowSeconds: 3,
      agentWorkLeaseSeconds: 60,
      shutdownDrainMs: 0,
    });
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'runner', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' },
    });
    assert.equal(created.status, 201, created.text);
    const agentId = created.body.agentId;
    const credentials = (await server.api('POST', `/agents/${agentId}/credentials`, { token: caller.token })).body;
    await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: agentId },
    });
    await server.api('POST', `/projects/${projectId}/variables`, {
      token: caller.token,
      body: { name: 'delay', type: 'NUMBER', behaviour: 'SHARED', value: 3 },
    });
    await uploadVersion(server, caller, projectId, 'prod', 'v1', { 'wait.orch.yaml': WAITING });
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    agent = await spawnAgent({ url: server.url, ...credentials, stateDir });
  });
  after(async () => {
    if (agent) {
      agent.child.kill('SIGKILL');
      await agent.exited;
    }
    await restarted?.server.close();
    await server.close();
    rmSync(stateDir, { recursive: true, force: true });
  });

  test('the agent retries its reports until the server is back; the run ends SUCCESS, run once', async () => {
    const started = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'prod', pipelineName: 'wait' },
    });
    assert.equal(started.status, 201, started.text);
    const id = started.body.pipelineExecutionId;
    const stepsOn = async (at: TestServer) =>
      (await at.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps?size=100`, { token: caller.token })).body
        .results as { name: string; result: { status: string; message: string | null } }[];
    await eventually(
      () => stepsOn(server),
      (list) => list.some((step) => step.name === 'Wait' && step.result.status === 'RUNNING'),
    );

    // The server stops while the step waits; the step ends while it is away.
    await server.server.close();
    const retried = await eventually(
      async () => agent!.logs(),
      (logs) => /"msg":"report not delivered; retrying"/.test(logs),
      20_000,
    );
    assert.match(retried, /"msg":"report not delivered; retrying"/, `the agent did not retry a report:\n${agent!.logs()}`);

    // Back on the same address, over the same store.
    restarted = await TestServer.startBeside(server, { port: Number(new URL(server.url).port) });
    const status = await eventually(
      async () =>
        (await restarted!.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token: caller.token })).body
          .status as string,
      (value) => value === 'SUCCESS' || value === 'FAILED',
      30_000,
    );
    assert.equal(status, 'SUCCESS', agent!.logs());
    assert.deepEqual(
      (await stepsOn(restarted)).map((step) => `${step.name}:${step.result.status}`),
      ['Start:SUCCESS', 'Wait:SUCCESS', 'End Success:SUCCESS'],
    );
    assert.match(agent!.logs(), /"msg":"report taken after retries"/);
    assert.doesNotMatch(agent!.logs(), /could not report|not run a second time/);
  });
});
