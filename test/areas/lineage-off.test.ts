import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { orchestration, runsChild, uploadVersion } from '../helpers/executions.ts';

/**
 * DPC_LINEAGE: on by default, a run whose steps report datasets records its START, a RUNNING event of each such
 * step, and its COMPLETE; `false` records nothing of it (no run or step event, no push queued), while
 * `GET /v1/lineage/events` still answers with what was recorded before. Two server processes over one store,
 * alike but for the setting; the agent is played over the agent protocol of the server under test.
 */
describeEachStore('lineage turned off (DPC_LINEAGE=false)', (kind) => {
  let on: TestServer;
  let off: TestServer;
  let caller: Caller;
  let projectId: string;
  let agentToken: string;

  /** start → a child pipeline: the run's steps include one that runs a pipeline (a child run of its own). */
  const PARENT = runsChild('pipelines/child');
  const CHILD = orchestration(`    Start:
      type: "start"
`);

  before(async () => {
    on = await TestServer.start(kind);
    ({ caller, projectId } = await on.prologue());
    // The same store, lineage off, and an OpenLineage endpoint (never reached: nothing may be queued for it).
    off = await TestServer.startBeside(on, {
      lineage: false,
      openLineageUrl: new URL('http://127.0.0.1:9/api/v1/lineage'),
      runJobs: false,
    });
    const created = await on.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'runner', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' },
    });
    assert.equal(created.status, 201, created.text);
    const credentials = (await on.api('POST', `/agents/${created.body.agentId}/credentials`, { token: caller.token })).body;
    agentToken = await on.token(credentials.clientId, credentials.clientSecret);
    const environment = await on.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: created.body.agentId },
    });
    assert.equal(environment.status, 201, environment.text);
    await uploadVersion(on, caller, projectId, 'prod', 'v1', {
      'pipelines/parent.orch.yaml': PARENT,
      'pipelines/child.orch.yaml': CHILD,
    });
  });
  after(async () => {
    await off.close();
    await on.close();
  });

  const lineage = (step: number) => ({
    inputs: [{ namespace: 'postgres://db.internal:5432', name: `shop.public.orders_${step}` }],
    outputs: [{ namespace: 'postgres://db.internal:5432', name: `shop.marts.daily_${step}` }],
    sql: `insert into shop.marts.daily_${step} select * from shop.public.orders_${step}`,
  });

  /**
   * A run of pipelines/parent played on `server` (created through its API, its work taken and reported over its
   * agent protocol): step 0 and the child's step 2 report datasets, step 1 runs the child pipeline; then done.
   */
  async function playRun(server: TestServer): Promise<string> {
    const agentCall = async (method: string, apiPath: string, body?: unknown) => {
      const answer = await server.request(method, `/dpc/agent/v1${apiPath}`, { token: agentToken, body });
      assert.equal(answer.status, 200, answer.text);
      return answer.body;
    };
    const started = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'prod', pipelineName: 'pipelines/parent.orch.yaml' },
    });
    assert.equal(started.status, 201, started.text);
    const work = await agentCall('GET', '/work?waitSeconds=5');
    assert.equal(work.payload.executionId, started.body.pipelineExecutionId);
    const report = (index: number, fields: Record<string, unknown>) =>
      agentCall('POST', `/work/${work.workId}/reports`, {
        type: 'progress',
        body: { step: { index, name: `Step ${index}`, startedAt: new Date().toISOString(), ...fields } },
      });
    const finished = () => ({ status: 'SUCCESS', finishedAt: new Date().toISOString() });
    await report(0, { status: 'RUNNING' });
    await report(0, { ...finished(), lineage: lineage(0) });
    await report(1, { status: 'RUNNING', runsPipeline: 'pipelines/child.orch.yaml' });
    // The run's steps are checked alike with lineage on and off (attack finding M3): a step naming one that runs
    // no pipeline as the step running it is refused, as is a second pipeline for step 1.
    for (const fields of [
      { childPipeline: 'pipelines/child.orch.yaml', parentStep: 0 },
      { runsPipeline: 'pipelines/parent.orch.yaml' },
    ]) {
      const refused = await server.request('POST', `/dpc/agent/v1/work/${work.workId}/reports`, {
        token: agentToken,
        body: {
          type: 'progress',
          body: { step: { index: 1, name: 'x', status: 'RUNNING', startedAt: new Date().toISOString(), ...fields } },
        },
      });
      assert.equal(refused.status, 400, refused.text);
    }
    await report(2, { ...finished(), childPipeline: 'pipelines/child.orch.yaml', parentStep: 1, lineage: lineage(2) });
    await report(1, { ...finished(), runsPipeline: 'pipelines/child.orch.yaml' });
    await agentCall('POST', `/work/${work.workId}/reports`, { type: 'done', body: {} });
    const status = await server.api(
      'GET',
      `/projects/${projectId}/pipeline-executions/${started.body.pipelineExecutionId}/status`,
      {
        token: caller.token,
      },
    );
    assert.equal(status.body.status, 'SUCCESS', status.text);
    return started.body.pipelineExecutionId;
  }

  /** The lineage events of the last minute as `server` answers them: [eventType, runId, job name]. */
  async function recentEvents(server: TestServer): Promise<[string, string, string][]> {
    const page = await server.api(
      'GET',
      `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`,
      { token: caller.token },
    );
    assert.equal(page.status, 200, page.text);
    return page.body.results.map(({ event }: { event: any }) => [event.eventType, event.run.runId, event.job.name]);
  }

  test('on (the default): the run records its START, the RUNNING events of its steps with datasets, and its COMPLETE', async () => {
    const executionId = await playRun(on);
    const events = (await recentEvents(on)).filter(([, runId]) => runId === executionId);
    assert.deepEqual(events, [
      ['START', executionId, 'pipelines/parent.orch.yaml'],
      ['RUNNING', executionId, 'pipelines/parent.orch.yaml'],
      ['COMPLETE', executionId, 'pipelines/parent.orch.yaml'],
    ]);
    // The child pipeline's run: START, its step's datasets, COMPLETE.
    const child = (await recentEvents(on)).filter(
      ([, runId, job]) => runId !== executionId && job === 'pipelines/child.orch.yaml',
    );
    assert.deepEqual(
      child.map(([type]) => type),
      ['START', 'RUNNING', 'COMPLETE'],
    );
  });

  test('off: the same run records no lineage event and queues no push; what was recorded before still answers', async () => {
    // Recorded before, by the process with lineage on: the one without reads it.
    const earlier = await playRun(on);
    const before = await recentEvents(off);
    assert.deepEqual(
      before.filter(([, runId]) => runId === earlier).map(([type]) => type),
      ['START', 'RUNNING', 'COMPLETE'],
    );
    const executionId = await playRun(off);
    assert.deepEqual(await recentEvents(off), before, 'no event of the run, nor of its child run');
    assert.deepEqual(await recentEvents(on), before, 'the same, as the other process reads the store');
    const rows = await off.db.selectFrom('lineageSteps').select('id').where('executionId', '=', executionId).execute();
    assert.deepEqual(rows, []);
    const pushes = await off.db.selectFrom('jobs').select('id').where('type', '=', 'lineage-push').execute();
    assert.deepEqual(pushes, []);
  });
});
