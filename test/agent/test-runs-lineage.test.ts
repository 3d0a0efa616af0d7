import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { runAgent, type RunningAgent } from '../../src/agent/run.ts';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';
import { assertRunEvent } from '../helpers/openlineage.ts';

const PASSING = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["End Success"]
    End Success:
      type: "end-success"
`);

const FAILING = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["End Failure"]
    End Failure:
      type: "end-failure"
`);

/**
 * A project's tests run by the reference agent (its loop, in this process, over the agent protocol to a real
 * server): when one of several test pipelines fails, the agent runs the others to their end and says which
 * failed, so in lineage the failing test's run ends FAIL and the passing ones' COMPLETE (attack finding L7),
 * under the test execution's run, which FAILs.
 */
describeEachStore('lineage of a test run of several test pipelines, with the reference agent', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let agent: RunningAgent;
  let stateDir: string;

  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, projectId } = await server.prologue());
    const api = (method: string, apiPath: string, body?: unknown) => server.api(method, apiPath, { token: caller.token, body });
    const created = await api('POST', '/agents', {
      name: 'tests',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'fargate',
    });
    assert.equal(created.status, 201, created.text);
    const credentials = (await api('POST', `/agents/${created.body.agentId}/credentials`)).body;
    assert.equal(
      (await api('POST', `/projects/${projectId}/environments`, { name: 'dev', defaultAgentId: created.body.agentId })).status,
      201,
    );
    await uploadVersion(server, caller, projectId, 'dev', 'v1', {
      'pipelines/orders.orch.yaml': PASSING,
      'pipelines/orders-count.test.orch.yaml': PASSING,
      'pipelines/orders-total.test.orch.yaml': FAILING,
      'pipelines/orders-dates.test.orch.yaml': PASSING,
    });
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-test-runs-lineage-'));
    agent = await runAgent({ url: server.url, clientId: credentials.clientId, clientSecret: credentials.clientSecret, stateDir });
  });
  after(async () => {
    await agent?.stop();
    await server.close();
    rmSync(stateDir, { recursive: true, force: true });
  });

  test("each test pipeline's run ends as it ended; the test run's own FAILs", async () => {
    const started = await server.api('POST', `/projects/${projectId}/test-executions`, {
      token: caller.token,
      body: { environmentName: 'dev', scope: 'PROJECT' },
    });
    assert.equal(started.status, 201, started.text);
    const id = started.body.testExecutionId as string;
    const run = await eventually(
      async () => (await server.api('GET', `/projects/${projectId}/test-executions/${id}`, { token: caller.token })).body,
      (body) => body.status === 'FAILED' || body.status === 'SUCCESS',
    );
    assert.equal(run.status, 'FAILED', JSON.stringify(run));
    const answer = await server.api(
      'GET',
      `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`,
      {
        token: caller.token,
      },
    );
    assert.equal(answer.status, 200, answer.text);
    const events = answer.body.results.map((result: { event: any }) => result.event);
    for (const event of events) assertRunEvent(event);
    const ends = new Map<string, string>(
      events
        .filter((event: any) => !['START', 'RUNNING'].includes(event.eventType))
        .map((event: any) => [event.job.name, event.eventType]),
    );
    assert.deepEqual(Object.fromEntries(ends), {
      '(tests)': 'FAIL',
      'pipelines/orders-count.test.orch.yaml': 'COMPLETE',
      'pipelines/orders-total.test.orch.yaml': 'FAIL',
      'pipelines/orders-dates.test.orch.yaml': 'COMPLETE',
    });
    // Each test pipeline's run is a child of the test run's.
    for (const event of events.filter((event: any) => event.job.name !== '(tests)'))
      assert.equal(event.run.facets.parent.run.runId, id);
  });
});
