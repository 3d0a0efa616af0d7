import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, eventually, runsChild, uploadVersion } from '../helpers/executions.ts';
import { assertRunEvent } from '../helpers/openlineage.ts';

/**
 * DPC_OPENLINEAGE_URL: every stored lineage event is POSTed to the endpoint by a durable job. A stand-in
 * receiver on 127.0.0.1 answers 503 to the first two tries of each event and then accepts: each of the run's
 * events (its START, the step's datasets, its COMPLETE) arrives on its third try, the same events
 * `GET /v1/lineage/events` answers.
 */
describeEachStore('lineage pushed to an OpenLineage endpoint', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let agentToken: string;
  let agentId: string;
  const received: { status: number; body: any }[] = [];
  const receiver = http.createServer((request, response) => {
    let text = '';
    request.on('data', (chunk) => (text += chunk));
    request.on('end', () => {
      const tries = received.filter((r) => JSON.stringify(r.body) === text).length;
      const status = tries < 2 ? 503 : 201;
      received.push({ status, body: JSON.parse(text) });
      response.writeHead(status, { 'content-type': 'application/json' }).end('{}');
    });
  });

  before(async () => {
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const { port } = receiver.address() as AddressInfo;
    server = await TestServer.start(kind, {
      openLineageUrl: new URL(`http://127.0.0.1:${port}/api/v1/lineage`),
      openLineageAttempts: 5,
      outboundAllowedRanges: ['127.0.0.1'],
    });
    ({ caller, projectId } = await server.prologue());
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'runner', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' },
    });
    agentId = created.body.agentId;
    const credentials = (await server.api('POST', `/agents/${agentId}/credentials`, { token: caller.token })).body;
    agentToken = await server.token(credentials.clientId, credentials.clientSecret);
    await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: created.body.agentId },
    });
    await uploadVersion(server, caller, projectId, 'prod', 'v1', {
      'pipelines/check.orch.yaml': CHECKING,
      'pipelines/parent.orch.yaml': runsChild('pipelines/check'),
    });
  });
  after(async () => {
    await server.close();
    receiver.close();
  });

  const agentCall = (method: string, apiPath: string, body?: unknown) =>
    server.request(method, `/dpc/agent/v1${apiPath}`, { token: agentToken, body });

  /** Starts a run of `pipelineName` (in `project`) and takes its work as the agent. */
  async function startRun(pipelineName: string, project = projectId) {
    const started = await server.api('POST', `/projects/${project}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'prod', pipelineName },
    });
    assert.equal(started.status, 201, started.text);
    return { executionId: started.body.pipelineExecutionId as string, work: await agentCall('GET', '/work?waitSeconds=5') };
  }

  /** Step `index` of work `workId` reported running the child pipeline pipelines/check (its run's START). */
  async function runsCheck(workId: string, index: number) {
    const step = {
      index,
      name: 'Child',
      status: 'RUNNING',
      startedAt: new Date().toISOString(),
      runsPipeline: 'pipelines/check.orch.yaml',
    };
    assert.equal((await agentCall('POST', `/work/${workId}/reports`, { type: 'progress', body: { step } })).status, 200);
  }

  test('an event the endpoint refuses at first is tried again until it is taken', async () => {
    const { work } = await startRun('pipelines/check.orch.yaml');
    const lineage = {
      inputs: [{ namespace: 'postgres://db:5432', name: 'shop.public.orders' }],
      outputs: [{ namespace: 'postgres://db:5432', name: 'shop.marts.daily' }],
    };
    const reported = await agentCall('POST', `/work/${work.body.workId}/reports`, {
      type: 'progress',
      body: { step: { index: 0, name: 'Load', status: 'SUCCESS', startedAt: new Date().toISOString(), lineage } },
    });
    assert.equal(reported.status, 200, reported.text);
    await agentCall('POST', `/work/${work.body.workId}/reports`, { type: 'done', body: {} });

    await eventually(
      async () => received.filter((r) => r.status === 201).length,
      (count) => count >= 3,
      20_000,
    );
    const page = await server.api('GET', `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}`, {
      token: caller.token,
    });
    assert.deepEqual(
      page.body.results.map((result: { event: { eventType: string } }) => result.event.eventType),
      ['START', 'RUNNING', 'COMPLETE'],
    );
    for (const { event } of page.body.results) {
      const tries = received.filter((r) => JSON.stringify(r.body) === JSON.stringify(event));
      assert.deepEqual(
        tries.map((r) => r.status),
        [503, 503, 201],
        event.eventType,
      );
    }
    for (const { body } of received) assertRunEvent(body);
    // Taken: no further try.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.equal(received.length, 9);
  });

  test("the child runs a run's end ends (in one statement) are pushed each on its own: one refused holds back no other (attack finding M2)", async () => {
    const { executionId, work } = await startRun('pipelines/parent.orch.yaml');
    for (const index of [1, 2, 3]) await runsCheck(work.body.workId, index);
    const cancelled = await server.api('PATCH', `/projects/${projectId}/pipeline-executions/${executionId}`, {
      token: caller.token,
      body: { forceUpdate: true, status: 'CANCELLED' },
    });
    assert.equal(cancelled.status, 200, cancelled.text);
    const ends = () =>
      received.filter(
        (r) =>
          r.body.eventType === 'ABORT' &&
          (r.body.run.runId === executionId || r.body.run.facets?.parent?.root.run.runId === executionId),
      );
    // Each ABORT (three child runs, then the run) refused twice, then taken: tried on its own, never again once taken.
    await eventually(
      async () => ends().filter((r) => r.status === 201).length,
      (count) => count >= 4,
      20_000,
    );
    const tries = new Map<string, number[]>();
    for (const r of ends()) tries.set(r.body.run.runId, [...(tries.get(r.body.run.runId) ?? []), r.status]);
    assert.equal(tries.size, 4);
    for (const statuses of tries.values()) assert.deepEqual(statuses, [503, 503, 201]);
  });

  test('a project deleted mid-run takes its events, and its runs going end ABORT at the endpoint (attack finding L6)', async () => {
    const doomed = await server.newProject(caller);
    await server.api('POST', `/projects/${doomed}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: agentId },
    });
    await uploadVersion(server, caller, doomed, 'prod', 'v1', {
      'pipelines/check.orch.yaml': CHECKING,
      'pipelines/parent.orch.yaml': runsChild('pipelines/check'),
    });
    const { executionId, work } = await startRun('pipelines/parent.orch.yaml', doomed);
    await runsCheck(work.body.workId, 1);
    const ofRun = (r: { body: any }) =>
      r.body.run.runId === executionId || r.body.run.facets?.parent?.root.run.runId === executionId;
    // Both STARTs are taken before the project goes.
    await eventually(
      async () => received.filter((r) => ofRun(r) && r.status === 201 && r.body.eventType === 'START').length,
      (count) => count >= 2,
      20_000,
    );
    const starts = received.filter((r) => ofRun(r) && r.status === 201).map((r) => r.body);
    const deleted = await server.api('DELETE', `/projects/${doomed}`, { token: caller.token });
    assert.equal(deleted.status, 204, deleted.text);
    await eventually(
      async () => received.filter((r) => ofRun(r) && r.status === 201 && r.body.eventType === 'ABORT').length,
      (count) => count >= 2,
      20_000,
    );
    const aborts = received.filter((r) => ofRun(r) && r.status === 201 && r.body.eventType === 'ABORT').map((r) => r.body);
    for (const event of aborts) assertRunEvent(event);
    // Each run started ends once, under its own run id and job, the child's with its parent facet as at its START.
    assert.deepEqual(
      aborts.map((event) => [event.run.runId, event.job.name, event.run.facets?.parent ?? null]).sort(),
      starts.map((event) => [event.run.runId, event.job.name, event.run.facets?.parent ?? null]).sort(),
    );
    const page = await server.api(
      'GET',
      `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`,
      {
        token: caller.token,
      },
    );
    assert.deepEqual(
      page.body.results.filter((result: { event: any }) => ofRun({ body: result.event })),
      [],
    );
  });
});
