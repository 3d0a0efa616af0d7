import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, runsChild, uploadVersion } from '../helpers/executions.ts';
import { assertRunEvent } from '../helpers/openlineage.ts';

/**
 * Lineage: the datasets a step reports become OpenLineage run events of its run, read back by
 * `GET /v1/lineage/events` as a catalogue's ingestion source reads them. The agent here is played over
 * the agent protocol, so that what it reports (good and bad) is exactly what the test says.
 */
describeEachStore('lineage events', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let projectId: string;
  let agentToken: string;

  const api = (method: string, apiPath: string, body?: unknown, token = caller.token) =>
    server.api(method, apiPath, { token, body });
  const agentCall = (method: string, apiPath: string, body?: unknown) =>
    server.request(method, `/dpc/agent/v1${apiPath}`, { token: agentToken, body });

  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, projectId } = await server.prologue());
    const created = await api('POST', '/agents', {
      name: 'runner',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'fargate',
    });
    assert.equal(created.status, 201, created.text);
    const credentials = (await api('POST', `/agents/${created.body.agentId}/credentials`)).body;
    agentToken = await server.token(credentials.clientId, credentials.clientSecret);
    assert.equal(
      (await api('POST', `/projects/${projectId}/environments`, { name: 'prod', defaultAgentId: created.body.agentId })).status,
      201,
    );
    await uploadVersion(server, caller, projectId, 'prod', 'v1', {
      'pipelines/check.orch.yaml': CHECKING,
      'pipelines/parent.orch.yaml': PARENT,
      'pipelines/child.orch.yaml': CHECKING,
      // outer → middle → inner: a child pipeline that runs one of its own.
      'pipelines/outer.orch.yaml': runs('pipelines/middle'),
      'pipelines/middle.orch.yaml': runs('pipelines/inner'),
      'pipelines/inner.orch.yaml': CHECKING,
      // Of the version, but no part of a run of check or parent.
      'pipelines/other.orch.yaml': CHECKING,
      // The project's tests (a test execution of scope PROJECT runs both).
      'pipelines/a.test.orch.yaml': CHECKING,
      'pipelines/b.test.orch.yaml': CHECKING,
    });
  });
  after(() => server.close());

  /** start → the child pipeline pipelines/child.orch.yaml. */
  const PARENT = runsChild('pipelines/child');
  const runs = runsChild;

  /** Starts a run and takes its work as the agent. */
  async function startRun(pipelineName = 'pipelines/check.orch.yaml') {
    const started = await api('POST', `/projects/${projectId}/pipeline-executions`, {
      environmentName: 'prod',
      pipelineName,
    });
    assert.equal(started.status, 201, started.text);
    const work = await agentCall('GET', '/work?waitSeconds=5');
    assert.equal(work.status, 200, work.text);
    assert.equal(work.body.payload.executionId, started.body.pipelineExecutionId);
    return { executionId: started.body.pipelineExecutionId as string, workId: work.body.workId as string };
  }

  const orders = { namespace: 'postgres://db.internal:5432', name: 'shop.public.orders' };
  const customers = { namespace: 'postgres://db.internal:5432', name: 'shop.public.customers' };
  const mart = { namespace: 'postgres://db.internal:5432', name: 'shop.marts.daily_orders' };

  /** The lineage events of the last minute, every page, as a catalogue pages them. */
  async function recentEvents(): Promise<any[]> {
    const from = new Date(Date.now() - 60_000).toISOString();
    const events: any[] = [];
    for (let page = 0; ; page += 1) {
      const answer = await api('GET', `/lineage/events?generatedFrom=${from}&size=100&page=${page}`);
      assert.equal(answer.status, 200, answer.text);
      for (const result of answer.body.results) assertRunEvent(result.event);
      events.push(...answer.body.results.map((result: { event: unknown }) => result.event));
      if (answer.body.results.length < 100) return events;
    }
  }

  /**
   * The events of an execution's runs, in the order recorded: its own run's (run id the execution id) and its
   * child pipelines' (whose START names the execution at the root of their parent facet).
   */
  async function eventsOfExecution(executionId: string): Promise<any[]> {
    const events = await recentEvents();
    const runs = new Set([executionId]);
    for (const event of events) if (event.run.facets?.parent?.root?.run.runId === executionId) runs.add(event.run.runId);
    return events.filter((event) => runs.has(event.run.runId));
  }

  /** A progress report of a step (finished now unless RUNNING). */
  const stepReport = (index: number, fields: Record<string, unknown> = {}) => ({
    type: 'progress',
    body: {
      step: {
        index,
        name: `Step ${index}`,
        status: 'SUCCESS',
        startedAt: new Date().toISOString(),
        ...(fields.status !== 'RUNNING' && { finishedAt: new Date().toISOString() }),
        ...fields,
      },
    },
  });

  test("a step's datasets become a run event of the pipeline's job; a catalogue reads them back", async () => {
    const { executionId, workId } = await startRun();
    const step = (index: number, name: string, lineage?: unknown) => ({
      type: 'progress',
      body: {
        step: {
          index,
          name,
          status: 'SUCCESS',
          startedAt: new Date().toISOString(),
          finishedAt: new Date().toISOString(),
          ...(lineage !== undefined && { lineage }),
        },
      },
    });
    assert.equal((await agentCall('POST', `/work/${workId}/reports`, step(0, 'Start'))).status, 200);
    const load = await agentCall(
      'POST',
      `/work/${workId}/reports`,
      step(1, 'Build mart', {
        inputs: [{ ...orders, fields: [{ name: 'id', type: 'integer' }, { name: 'amount' }] }, customers],
        outputs: [
          {
            ...mart,
            fields: [{ name: 'day' }, { name: 'total' }],
            columnLineage: { total: [{ ...orders, field: 'amount' }], day: [{ ...orders, field: 'created_at' }] },
          },
        ],
        sql: 'insert into marts.daily_orders select ...',
      }),
    );
    assert.equal(load.status, 200, load.text);
    // A step that touched no dataset records nothing.
    await agentCall('POST', `/work/${workId}/reports`, step(2, 'Print', { inputs: [], outputs: [] }));
    await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} });

    const page = await api(
      'GET',
      `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}`,
      undefined,
      viewer,
    );
    assert.equal(page.status, 200, page.text);
    // One OpenLineage run: its START when the execution was created, the step that read and wrote data, its end.
    assert.deepEqual(
      page.body.results.map((result: { event: { eventType: string; run: { runId: string } } }) => [
        result.event.eventType,
        result.event.run.runId,
      ]),
      [
        ['START', executionId],
        ['RUNNING', executionId],
        ['COMPLETE', executionId],
      ],
    );
    for (const { event } of page.body.results) {
      assert.equal(event.job.name, 'pipelines/check.orch.yaml');
      assert.equal(event.job.facets.jobType.processingType, 'BATCH');
      assertRunEvent(event);
    }
    const [start, { id, event }, complete] = page.body.results.map((result: unknown) => result) as any[];
    assert.deepEqual([start.event.inputs, start.event.outputs, complete.event.inputs, complete.event.outputs], [[], [], [], []]);
    assert.equal(start.event.run.facets, undefined, 'a run-level event names no step');
    assert.ok(start.event.eventTime <= event.eventTime && event.eventTime <= complete.event.eventTime);
    assert.match(id, /^\d+$/);
    assert.equal(event.run.facets.dpc_step.status, 'SUCCESS');
    assert.deepEqual(event.job.namespace, `dpc://${caller.accountId}.${projectId}`);
    assert.equal(event.job.name, 'pipelines/check.orch.yaml');
    assert.equal(event.job.facets.sql.query, 'insert into marts.daily_orders select ...');
    assert.equal(event.run.facets.dpc_step.name, 'Build mart');
    assert.deepEqual(
      event.inputs.map((input: { name: string }) => input.name),
      ['shop.public.orders', 'shop.public.customers'],
    );
    assert.deepEqual(event.inputs[0].facets.schema.fields, [{ name: 'id', type: 'integer' }, { name: 'amount' }]);
    // As DataHub's matillion source reads column lineage: outputs[].facets.columnLineage.fields[col].inputFields.
    assert.deepEqual(event.outputs[0].facets.columnLineage.fields.total.inputFields, [{ ...orders, field: 'amount' }]);
    // Each facet names its published schema (attack finding L8); dpc_step, a custom facet, the producer's.
    assert.deepEqual(
      [
        event.job.facets.jobType,
        event.job.facets.sql,
        event.inputs[0].facets.schema,
        event.outputs[0].facets.columnLineage,
        event.run.facets.dpc_step,
      ].map((facet: { _producer: string; _schemaURL: string }) => [facet._producer, facet._schemaURL]),
      [
        'https://openlineage.io/spec/facets/2-0-3/JobTypeJobFacet.json#/$defs/JobTypeJobFacet',
        'https://openlineage.io/spec/facets/1-0-1/SQLJobFacet.json#/$defs/SQLJobFacet',
        'https://openlineage.io/spec/facets/1-0-0/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet',
        'https://openlineage.io/spec/facets/1-0-1/ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet',
        'https://platform-api.dev/spec/facets/1-0-0/DpcStepRunFacet.json#/$defs/DpcStepRunFacet',
      ].map((url) => ['https://platform-api.dev/agent', url]),
    );
    assertRunEvent(event);
  });

  test('a report with malformed lineage is refused naming the field; the run is untouched', async () => {
    const { executionId, workId } = await startRun();
    const bad = await agentCall('POST', `/work/${workId}/reports`, {
      type: 'progress',
      body: {
        step: {
          index: 0,
          name: 'Load',
          status: 'SUCCESS',
          startedAt: new Date().toISOString(),
          lineage: { inputs: [{ namespace: '', name: 'x' }], outputs: 'everything' },
        },
      },
    });
    const problem = expectProblem(bad, 400);
    assert.deepEqual(problem.violations, [
      'body.body.step.lineage.inputs[0].namespace: must be a string of 1 to 1024 characters',
      'body.body.step.lineage.outputs: must be a list of at most 500 datasets',
    ]);
    const steps = await api('GET', `/projects/${projectId}/pipeline-executions/${executionId}/steps`);
    assert.equal(steps.status, 200, steps.text);
    assert.deepEqual(steps.body.results, [], 'the step of a refused report is not recorded');
    await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} });
  });

  test("a step's rowsWritten that is not a count is refused naming the field (consumption's rows written)", async () => {
    const { executionId, workId } = await startRun();
    for (const rowsWritten of [-1, 1.5, '7', 2 ** 48 + 1, Number.MAX_SAFE_INTEGER]) {
      const bad = await agentCall('POST', `/work/${workId}/reports`, {
        type: 'progress',
        body: { step: { index: 0, name: 'Load', status: 'SUCCESS', startedAt: new Date().toISOString(), rowsWritten } },
      });
      assert.deepEqual(expectProblem(bad, 400).violations, [
        'body.body.step.rowsWritten: must be a whole number of rows, 0 to 281474976710656',
      ]);
    }
    const steps = await api('GET', `/projects/${projectId}/pipeline-executions/${executionId}/steps`);
    assert.deepEqual(steps.body.results, [], 'the step of a refused report is not recorded');
    const good = await agentCall('POST', `/work/${workId}/reports`, {
      type: 'progress',
      body: { step: { index: 0, name: 'Load', status: 'SUCCESS', startedAt: new Date().toISOString(), rowsWritten: 7 } },
    });
    assert.equal(good.status, 200, good.text);
    const row = await server.db
      .selectFrom('executionSteps')
      .select('rowsWritten')
      .where('executionId', '=', executionId)
      .executeTakeFirstOrThrow();
    assert.equal(Number(row.rowsWritten), 7);
    await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} });
  });

  test("a step whose fields are not as typed is refused (400 naming the field); the run's steps still answer (attack finding 4)", async () => {
    const { executionId, workId } = await startRun();
    const at = new Date().toISOString();
    const step = { index: 3, name: 'x', status: 'RUNNING', startedAt: at };
    const cases: [Record<string, unknown>, string][] = [
      [{ childPipeline: { a: 1 } }, 'body.body.step.childPipeline'],
      [{ message: { x: 1 } }, 'body.body.step.message'],
      [{ status: 'BOGUS' }, 'body.body.step.status'],
      [{ startedAt: 'yesterday' }, 'body.body.step.startedAt'],
      [{ finishedAt: 12 }, 'body.body.step.finishedAt'],
      [{ finishedAt: 'alsonot' }, 'body.body.step.finishedAt'],
      [{ index: 3_000_000_000 }, 'body.body.step.index'],
      [{ index: 1e308 }, 'body.body.step.index'],
      [{ index: -1 }, 'body.body.step.index'],
      [{ name: 5 }, 'body.body.step.name'],
      // Checked past the schema, and named the same way (attack finding: once `body.step.…` here).
      [{ rowsWritten: -1 }, 'body.body.step.rowsWritten'],
      [{ lineage: 'everything' }, 'body.body.step.lineage'],
    ];
    for (const [change, field] of cases) {
      const bad = await agentCall('POST', `/work/${workId}/reports`, {
        type: 'progress',
        body: { step: { ...step, ...change } },
      });
      const problem = expectProblem(bad, 400);
      assert.deepEqual(
        problem.violations?.map((violation: string) => violation.split(':')[0]),
        [field],
        `${JSON.stringify(change)}: ${bad.text}`,
      );
    }
    const missing = expectProblem(
      await agentCall('POST', `/work/${workId}/reports`, { type: 'progress', body: { step: { index: 0 } } }),
      400,
    );
    assert.deepEqual(missing.violations?.map((violation: string) => violation.split(':')[0]).sort(), [
      'body.body.step.name',
      'body.body.step.startedAt',
      'body.body.step.status',
    ]);
    const steps = await api('GET', `/projects/${projectId}/pipeline-executions/${executionId}/steps`);
    assert.equal(steps.status, 200, steps.text);
    assert.deepEqual(steps.body.results, [], 'no refused step is recorded');
    const good = await agentCall('POST', `/work/${workId}/reports`, {
      type: 'progress',
      body: { step: { ...step, status: 'SUCCESS', finishedAt: at, message: 'ok', childPipeline: 'pipelines/check.orch.yaml' } },
    });
    assert.equal(good.status, 200, good.text);
    const after = await api('GET', `/projects/${projectId}/pipeline-executions/${executionId}/steps`);
    assert.equal(after.status, 200, after.text);
    assert.deepEqual(
      after.body.results.map((row: { id: string; result: { status: string } }) => [row.id, row.result.status]),
      [['3', 'SUCCESS']],
    );
    await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} });
  });

  test("windows: at most 31 days, in order, paged; another account's events are never shown", async () => {
    const from = new Date(Date.now() - 3_600_000).toISOString();
    const mine = await api('GET', `/lineage/events?generatedFrom=${from}&size=1&page=0`);
    assert.ok(mine.body.total > 1, mine.text);
    assert.equal(mine.body.size, 1);
    assert.equal(mine.body.results.length, 1);
    const other = await server.newAccount('other');
    const theirs = await api('GET', `/lineage/events?generatedFrom=${from}`, undefined, other.token);
    assert.deepEqual(theirs.body, { page: 0, results: [], size: 25, total: 0 });

    // Dates and date-times without an offset are UTC; the window may not pass 31 days.
    assert.equal((await api('GET', '/lineage/events?generatedFrom=2026-01-01&generatedBefore=2026-02-01')).status, 200);
    assert.equal(
      (await api('GET', '/lineage/events?generatedFrom=2026-01-01T00:00:00&generatedBefore=2026-01-02T00:00:00')).status,
      200,
    );
    const long = expectProblem(await api('GET', '/lineage/events?generatedFrom=2026-01-01&generatedBefore=2026-02-02'), 400);
    assert.ok(long.violations?.[0].startsWith('querystring.generatedFrom'));
    const reversed = expectProblem(await api('GET', '/lineage/events?generatedFrom=2026-02-01&generatedBefore=2026-01-01'), 400);
    assert.ok(reversed.violations?.[0].startsWith('querystring.generatedBefore'));
    expectProblem(await api('GET', '/lineage/events?generatedFrom=yesterday-ish'), 400);
    // Days that are not in the calendar are refused, not rolled over into the next month (attack finding F4).
    for (const day of ['2026-02-30', '2026-11-31T10:00:00Z', '2026-13-01'])
      expectProblem(await api('GET', `/lineage/events?generatedFrom=${day}`), 400);
    // Years before 100 are years of the calendar too (Date.UTC would read 0099 as 1999: attack finding A20).
    assert.equal((await api('GET', '/lineage/events?generatedFrom=0099-01-01&generatedBefore=0099-01-02')).status, 200);
    assert.equal((await api('GET', '/lineage/events?generatedFrom=0000-01-01&generatedBefore=0000-01-20')).status, 200);
    expectProblem(await server.api('GET', '/lineage/events'), 401);
  });

  test("a step's childPipeline names a pipeline the run holds (its job in lineage); any other is refused naming the field (attack finding F6)", async () => {
    const { executionId, workId } = await startRun('pipelines/parent.orch.yaml');
    const report = (index: number, childPipeline: string, withLineage = true) =>
      agentCall(
        'POST',
        `/work/${workId}/reports`,
        stepReport(index, {
          childPipeline,
          ...(withLineage && { lineage: { inputs: [orders], outputs: [{ ...mart, name: `shop.marts.f6_${index}` }] } }),
        }),
      );
    // Another pipeline of the version (not run by this one), one of no version, and a look-alike path.
    for (const [i, forged] of ['pipelines/other.orch.yaml', 'pipelines/payroll.orch.yaml', 'pipelines/child'].entries()) {
      for (const withLineage of [true, false]) {
        const refused = expectProblem(await report(i, forged, withLineage), 400);
        assert.deepEqual(
          refused.violations?.map((violation: string) => violation.split(':')[0]),
          ['body.body.step.childPipeline'],
          refused.detail,
        );
      }
    }
    const steps = await api('GET', `/projects/${projectId}/pipeline-executions/${executionId}/steps`);
    assert.deepEqual(steps.body.results, [], 'no refused step is recorded');
    // The child pipeline the run runs, and the run's own pipeline, are taken.
    assert.equal((await report(5, 'pipelines/child.orch.yaml')).status, 200);
    assert.equal((await report(6, 'pipelines/parent.orch.yaml')).status, 200);
    await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} });
    // A child pipeline's step that names no step running it is of that pipeline's one run in the execution:
    // started with its first step, ended with the execution.
    const events = await eventsOfExecution(executionId);
    const child = events.find((event) => event.job.name === 'pipelines/child.orch.yaml')!.run.runId;
    assert.notEqual(child, executionId);
    assert.deepEqual(
      events.map((event) => [
        event.eventType,
        event.run.runId === executionId ? 'run' : 'child',
        event.job.name,
        event.run.facets?.dpc_step?.index,
      ]),
      [
        ['START', 'run', 'pipelines/parent.orch.yaml', undefined],
        ['START', 'child', 'pipelines/child.orch.yaml', undefined],
        ['RUNNING', 'child', 'pipelines/child.orch.yaml', 5],
        ['RUNNING', 'run', 'pipelines/parent.orch.yaml', 6],
        ['COMPLETE', 'child', 'pipelines/child.orch.yaml', undefined],
        ['COMPLETE', 'run', 'pipelines/parent.orch.yaml', undefined],
      ],
    );
    assert.deepEqual(
      {
        run: events[1].run.facets.parent.run,
        job: events[1].run.facets.parent.job.name,
        root: events[1].run.facets.parent.root.run,
      },
      { run: { runId: executionId }, job: 'pipelines/parent.orch.yaml', root: { runId: executionId } },
    );
  });

  test("a step that runs a child pipeline starts and ends that pipeline's run; the child's steps are of it, and its parent run facet names the run that ran it", async () => {
    const { executionId, workId } = await startRun('pipelines/outer.orch.yaml');
    const report = async (index: number, fields: Record<string, unknown>) => {
      const answer = await agentCall('POST', `/work/${workId}/reports`, stepReport(index, fields));
      assert.equal(answer.status, 200, answer.text);
    };
    const middle = { childPipeline: 'pipelines/middle.orch.yaml', parentStep: 1 };
    const inner = { childPipeline: 'pipelines/inner.orch.yaml', parentStep: 3 };
    await report(0, {});
    await report(1, { status: 'RUNNING' });
    // Reported running again once the step knows the pipeline it runs (as the reference agent does), and again.
    await report(1, { status: 'RUNNING', runsPipeline: 'pipelines/middle.orch.yaml' });
    await report(1, { status: 'RUNNING', runsPipeline: 'pipelines/middle.orch.yaml' });
    await report(2, { ...middle });
    await report(3, { ...middle, status: 'RUNNING', runsPipeline: 'pipelines/inner.orch.yaml' });
    await report(4, { ...inner, lineage: { inputs: [orders], outputs: [{ ...mart, name: 'shop.marts.inner' }] } });
    await report(3, { ...middle, runsPipeline: 'pipelines/inner.orch.yaml' });
    await report(1, { runsPipeline: 'pipelines/middle.orch.yaml' });
    assert.equal((await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} })).status, 200);

    const events = await eventsOfExecution(executionId);
    const runIds = new Map<string, string>([[executionId, 'outer']]);
    for (const event of events)
      if (event.eventType === 'START') runIds.set(event.run.runId, event.job.name.split('/')[1].split('.')[0]);
    assert.equal(runIds.size, 3, 'three runs: the execution and one of each child pipeline');
    assert.deepEqual(
      events.map((event) => [event.eventType, runIds.get(event.run.runId), event.job.name]),
      [
        ['START', 'outer', 'pipelines/outer.orch.yaml'],
        ['START', 'middle', 'pipelines/middle.orch.yaml'],
        ['START', 'inner', 'pipelines/inner.orch.yaml'],
        ['RUNNING', 'inner', 'pipelines/inner.orch.yaml'],
        ['COMPLETE', 'inner', 'pipelines/inner.orch.yaml'],
        ['COMPLETE', 'middle', 'pipelines/middle.orch.yaml'],
        ['COMPLETE', 'outer', 'pipelines/outer.orch.yaml'],
      ],
    );
    const runOf = (name: string) => [...runIds].find(([, job]) => job === name)![0];
    const parentOf = (event: any) => ({
      run: event.run.facets.parent.run.runId,
      job: event.run.facets.parent.job,
      root: event.run.facets.parent.root,
    });
    const namespace = `dpc://${caller.accountId}.${projectId}`;
    const root = { run: { runId: executionId }, job: { namespace, name: 'pipelines/outer.orch.yaml' } };
    // The middle pipeline was run by the execution's run; the inner one by the middle one's.
    for (const event of events.filter((e) => e.job.name === 'pipelines/middle.orch.yaml')) {
      assert.deepEqual(parentOf(event), { run: executionId, job: { namespace, name: 'pipelines/outer.orch.yaml' }, root });
    }
    for (const event of events.filter((e) => e.job.name === 'pipelines/inner.orch.yaml' && e.eventType !== 'RUNNING')) {
      assert.deepEqual(parentOf(event), { run: runOf('middle'), job: { namespace, name: 'pipelines/middle.orch.yaml' }, root });
    }
    assert.equal(events[3].run.facets.dpc_step.index, 4);
    assert.deepEqual(
      events[3].outputs.map((output: { name: string }) => output.name),
      ['shop.marts.inner'],
    );
  });

  test('a run that ends with child runs left open ends them as it ended: ABORT when cancelled by force, FAIL when the agent reports it failed', async () => {
    for (const ending of ['force-cancel', 'failed'] as const) {
      const { executionId, workId } = await startRun('pipelines/outer.orch.yaml');
      const report = async (index: number, fields: Record<string, unknown>) =>
        assert.equal((await agentCall('POST', `/work/${workId}/reports`, stepReport(index, fields))).status, 200);
      await report(1, { status: 'RUNNING', runsPipeline: 'pipelines/middle.orch.yaml' });
      await report(2, { status: 'RUNNING', childPipeline: 'pipelines/middle.orch.yaml', parentStep: 1 });
      if (ending === 'force-cancel') {
        const cancelled = await api('PATCH', `/projects/${projectId}/pipeline-executions/${executionId}`, {
          forceUpdate: true,
          status: 'CANCELLED',
        });
        assert.equal(cancelled.status, 200, cancelled.text);
      } else {
        const failed = await agentCall('POST', `/work/${workId}/reports`, {
          type: 'failed',
          body: { message: 'lost the warehouse' },
        });
        assert.equal(failed.status, 200, failed.text);
      }
      const end = ending === 'force-cancel' ? 'ABORT' : 'FAIL';
      const events = await eventsOfExecution(executionId);
      assert.deepEqual(
        events.map((event) => [event.eventType, event.job.name]),
        [
          ['START', 'pipelines/outer.orch.yaml'],
          ['START', 'pipelines/middle.orch.yaml'],
          [end, 'pipelines/middle.orch.yaml'],
          [end, 'pipelines/outer.orch.yaml'],
        ],
        ending,
      );
      assert.equal(events[2].run.runId, events[1].run.runId);
      assert.deepEqual(events[2].run.facets.parent, events[1].run.facets.parent);
    }
  });

  test("a failed test run's test pipelines end as each ended: FAIL those the agent names failed, COMPLETE the others (attack finding L7)", async () => {
    const started = await api('POST', `/projects/${projectId}/test-executions`, { environmentName: 'prod', scope: 'PROJECT' });
    assert.equal(started.status, 201, started.text);
    const executionId = started.body.testExecutionId as string;
    const work = await agentCall('GET', '/work?waitSeconds=5');
    assert.equal(work.status, 200, work.text);
    assert.equal(work.body.payload.executionId, executionId);
    const [first, second] = work.body.payload.tests as string[];
    assert.deepEqual([first, second].sort(), ['pipelines/a.test.orch.yaml', 'pipelines/b.test.orch.yaml']);
    const workId = work.body.workId as string;
    const report = async (index: number, fields: Record<string, unknown>) =>
      assert.equal((await agentCall('POST', `/work/${workId}/reports`, stepReport(index, fields))).status, 200);
    await report(0, { childPipeline: first, status: 'FAILED' });
    await report(1, { childPipeline: second });
    const end = (body: Record<string, unknown>) => agentCall('POST', `/work/${workId}/reports`, { type: 'failed', body });
    // failedPipelines names tests of this run, each once, and only with code pipeline-failed.
    for (const body of [
      { message: 'x', code: 'pipeline-failed', failedPipelines: ['pipelines/check.orch.yaml'] },
      { message: 'x', code: 'pipeline-failed', failedPipelines: [first, first] },
      { message: 'x', code: 'pipeline-failed', failedPipelines: first },
      { message: 'x', code: 'interrupted', failedPipelines: [first] },
    ]) {
      const problem = expectProblem(await end(body), 400);
      assert.ok(
        problem.violations?.some((violation) => violation.startsWith('body.body.failedPipelines:')),
        JSON.stringify(problem),
      );
    }
    const failed = await end({ message: `${first}: an assertion failed`, code: 'pipeline-failed', failedPipelines: [first] });
    assert.equal(failed.status, 200, failed.text);
    const events = await eventsOfExecution(executionId);
    assert.deepEqual(
      events.map((event) => [event.eventType, event.job.name]),
      [
        ['START', '(tests)'],
        ['START', first],
        ['START', second],
        ['COMPLETE', second],
        ['FAIL', first],
        ['FAIL', '(tests)'],
      ],
    );
    // Without failedPipelines (an agent that does not say), every test pipeline's run ends as the execution did.
    const again = await api('POST', `/projects/${projectId}/test-executions`, { environmentName: 'prod', scope: 'PROJECT' });
    const next = await agentCall('GET', '/work?waitSeconds=5');
    assert.equal(next.body.payload.executionId, again.body.testExecutionId);
    for (const [index, test] of (next.body.payload.tests as string[]).entries())
      await agentCall('POST', `/work/${next.body.workId}/reports`, stepReport(index, { childPipeline: test }));
    await agentCall('POST', `/work/${next.body.workId}/reports`, {
      type: 'failed',
      body: { message: 'lost', code: 'pipeline-failed' },
    });
    const ends = (await eventsOfExecution(again.body.testExecutionId)).filter((event) => event.eventType !== 'START');
    assert.deepEqual(
      ends.map((event) => event.eventType),
      ['FAIL', 'FAIL', 'FAIL'],
    );
  });

  test('a step may name only a pipeline of the run as the one it runs, and only an earlier step, with its childPipeline, as the one running it', async () => {
    const { executionId, workId } = await startRun('pipelines/outer.orch.yaml');
    const cases: [Record<string, unknown>, string[]][] = [
      [{ runsPipeline: 'pipelines/other.orch.yaml' }, ['body.body.step.runsPipeline']],
      [
        { runsPipeline: 'pipelines/payroll.orch.yaml', childPipeline: 'pipelines/nothing.orch.yaml' },
        ['body.body.step.childPipeline', 'body.body.step.runsPipeline'],
      ],
      [{ parentStep: 1 }, ['body.body.step.parentStep']],
      [{ parentStep: 5, childPipeline: 'pipelines/middle.orch.yaml' }, ['body.body.step.parentStep']],
      [{ parentStep: 6, childPipeline: 'pipelines/middle.orch.yaml' }, ['body.body.step.parentStep']],
      // An earlier step, but not one reported running this step's pipeline (attack finding L3).
      [{ parentStep: 2, childPipeline: 'pipelines/middle.orch.yaml' }, ['body.body.step.parentStep']],
      [{ parentStep: -1, childPipeline: 'pipelines/middle.orch.yaml' }, ['body.body.step.parentStep']],
      [{ parentStep: '1', childPipeline: 'pipelines/middle.orch.yaml' }, ['body.body.step.parentStep']],
      [{ runsPipeline: ['pipelines/middle.orch.yaml'] }, ['body.body.step.runsPipeline']],
    ];
    for (const [fields, violations] of cases) {
      const refused = expectProblem(await agentCall('POST', `/work/${workId}/reports`, stepReport(5, fields)), 400);
      assert.deepEqual(
        refused.violations?.map((violation: string) => violation.split(':')[0]),
        violations,
        JSON.stringify(fields),
      );
    }
    const steps = await api('GET', `/projects/${projectId}/pipeline-executions/${executionId}/steps`);
    assert.deepEqual(steps.body.results, [], 'no refused step is recorded');
    await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} });
    const events = await eventsOfExecution(executionId);
    assert.deepEqual(
      events.map((event) => [event.eventType, event.job.name]),
      [
        ['START', 'pipelines/outer.orch.yaml'],
        ['COMPLETE', 'pipelines/outer.orch.yaml'],
      ],
      'a refused report starts no child run',
    );
  });

  test('a step runs one child pipeline, whose run has one START and one end however the step is reported again (attack finding L2); its steps name it (L3)', async () => {
    const { executionId, workId } = await startRun('pipelines/outer.orch.yaml');
    const report = (index: number, fields: Record<string, unknown>) =>
      agentCall('POST', `/work/${workId}/reports`, stepReport(index, fields));
    const middle = 'pipelines/middle.orch.yaml';
    assert.equal((await report(1, { status: 'RUNNING', runsPipeline: middle })).status, 200);
    // Another pipeline for the same step: refused, naming the field.
    const other = expectProblem(await report(1, { status: 'RUNNING', runsPipeline: 'pipelines/inner.orch.yaml' }), 400);
    assert.deepEqual(
      other.violations?.map((v: string) => v.split(':')[0]),
      ['body.body.step.runsPipeline'],
    );
    // A step of another pipeline naming step 1 as the one running it: refused.
    const wrong = expectProblem(await report(2, { childPipeline: 'pipelines/inner.orch.yaml', parentStep: 1 }), 400);
    assert.deepEqual(
      wrong.violations?.map((v: string) => v.split(':')[0]),
      ['body.body.step.parentStep'],
    );
    assert.equal((await report(2, { childPipeline: middle, parentStep: 1 })).status, 200);
    // Ended, ended otherwise, running again: the first end stands.
    for (const status of ['SUCCESS', 'FAILED', 'CANCELLED', 'RUNNING', 'SUCCESS']) {
      assert.equal((await report(1, { status, runsPipeline: middle })).status, 200, status);
    }
    assert.equal((await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} })).status, 200);
    const events = await eventsOfExecution(executionId);
    assert.deepEqual(
      events.map((event) => [event.eventType, event.job.name]),
      [
        ['START', 'pipelines/outer.orch.yaml'],
        ['START', middle],
        ['COMPLETE', middle],
        ['COMPLETE', 'pipelines/outer.orch.yaml'],
      ],
    );
  });

  test("a run's end ends every child run it leaves open, in one statement, each once (attack finding L1)", async () => {
    const { executionId, workId } = await startRun('pipelines/outer.orch.yaml');
    const open = 60;
    for (let index = 1; index <= open; index += 1) {
      const answer = await agentCall(
        'POST',
        `/work/${workId}/reports`,
        stepReport(index, { status: 'RUNNING', runsPipeline: 'pipelines/middle.orch.yaml' }),
      );
      assert.equal(answer.status, 200, answer.text);
    }
    // One of them ended by its step.
    await agentCall(
      'POST',
      `/work/${workId}/reports`,
      stepReport(7, { status: 'FAILED', runsPipeline: 'pipelines/middle.orch.yaml' }),
    );
    const cancelled = await api('PATCH', `/projects/${projectId}/pipeline-executions/${executionId}`, {
      forceUpdate: true,
      status: 'CANCELLED',
    });
    assert.equal(cancelled.status, 200, cancelled.text);
    const rows = await server.db
      .selectFrom('lineageSteps')
      .select(['runId', 'runPhase', 'stepStatus'])
      .where('executionId', '=', executionId)
      .where('jobKind', '=', 'RUN')
      .execute();
    const byRun = new Map<string, string[]>();
    for (const row of rows) byRun.set(row.runId!, [...(byRun.get(row.runId!) ?? []), row.stepStatus]);
    assert.equal(byRun.size, open + 1);
    for (const [runId, statuses] of byRun) {
      const expected = runId === executionId || statuses.includes('ABORT') ? ['START', 'ABORT'] : ['START', 'FAIL'];
      assert.deepEqual(statuses.sort(), expected.sort(), runId);
    }
    assert.equal([...byRun.values()].filter((statuses) => statuses.includes('FAIL')).length, 1);
  });

  test('a run started before run events were recorded (migration 0046) gets its START with its end (attack finding L4)', async () => {
    const { executionId, workId } = await startRun();
    await server.db.deleteFrom('lineageSteps').where('executionId', '=', executionId).execute();
    assert.equal((await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} })).status, 200);
    const events = await eventsOfExecution(executionId);
    assert.deepEqual(
      events.map((event) => event.eventType),
      ['START', 'COMPLETE'],
    );
    const run = await api('GET', `/projects/${projectId}/pipeline-executions/${executionId}`);
    assert.equal(Date.parse(events[0].eventTime), Date.parse(run.body.startedAt), "the START is at the run's start");
  });

  test("reports racing their project's deletion leave none of its lineage behind (attack finding F3)", async () => {
    const agentId = (await api('GET', '/agents')).body.results.find((agent: { name: string }) => agent.name === 'runner').agentId;
    const leftBehind: number[] = [];
    for (let round = 0; round < 4; round += 1) {
      const project = await api('POST', '/projects', { name: `doomed ${round}`, description: 'deleted while its runs report' });
      assert.equal(project.status, 201, project.text);
      const doomed = project.body.projectId as string;
      assert.equal(
        (await api('POST', `/projects/${doomed}/environments`, { name: 'prod', defaultAgentId: agentId })).status,
        201,
      );
      await uploadVersion(server, caller, doomed, 'prod', 'v1', { 'pipelines/check.orch.yaml': CHECKING });
      const works: string[] = [];
      for (let i = 0; i < 3; i += 1) {
        const started = await api('POST', `/projects/${doomed}/pipeline-executions`, {
          environmentName: 'prod',
          pipelineName: 'pipelines/check.orch.yaml',
        });
        assert.equal(started.status, 201, started.text);
        works.push((await agentCall('GET', '/work?waitSeconds=5')).body.workId);
      }
      const reports = Array.from({ length: 45 }, (_, i) =>
        agentCall('POST', `/work/${works[i % works.length]}/reports`, {
          type: 'progress',
          body: {
            step: {
              index: i,
              name: `Step ${i}`,
              status: 'SUCCESS',
              startedAt: new Date().toISOString(),
              finishedAt: new Date().toISOString(),
              lineage: { inputs: [{ ...orders, name: `shop.public.orders_${i}` }], outputs: [mart] },
            },
          },
        }),
      );
      await new Promise((resolve) => setTimeout(resolve, round * 3));
      const deleted = await api('DELETE', `/projects/${doomed}`);
      assert.equal(deleted.status, 204, deleted.text);
      for (const report of await Promise.all(reports))
        assert.ok([200, 409, 410].includes(report.status) || report.status === 404, report.text);
      const steps = await server.db.selectFrom('lineageSteps').select('id').where('projectId', '=', doomed).execute();
      const bodies = await server.db.selectFrom('lineageBodies').select('hash').where('projectId', '=', doomed).execute();
      leftBehind.push(steps.length + bodies.length);
    }
    assert.deepEqual(leftBehind, [0, 0, 0, 0]);
  });

  test('the same datasets reported by another run are a second event whose body is stored once; they go with the project', async () => {
    const lineage = {
      inputs: [{ ...orders, fields: [{ name: 'id', type: 'integer' }], unknownToTheContract: true }],
      outputs: [{ ...mart, columnLineage: { total: [{ ...orders, field: 'amount' }] } }],
    };
    const report = (index: number) => ({
      type: 'progress',
      body: {
        step: {
          index,
          name: 'Again',
          status: index === 0 ? 'FAILED' : 'SUCCESS',
          startedAt: new Date().toISOString(),
          finishedAt: new Date().toISOString(),
          lineage,
        },
      },
    });
    const runs = [await startRun(), await startRun()];
    for (const [i, { workId }] of runs.entries()) {
      assert.equal((await agentCall('POST', `/work/${workId}/reports`, report(i))).status, 200);
      await agentCall('POST', `/work/${workId}/reports`, { type: 'done', body: {} });
    }
    const events = (await recentEvents()).filter(
      (event) => runs.some((run) => run.executionId === event.run.runId) && event.run.facets?.dpc_step,
    );
    assert.deepEqual(
      events.map((event) => [event.eventType, event.run.facets.dpc_step.status]),
      [
        ['RUNNING', 'FAILED'],
        ['RUNNING', 'SUCCESS'],
      ],
    );
    // What the contract does not name is not part of the event.
    assert.equal('unknownToTheContract' in events[0].inputs[0], false);
    const bodies = await server.db.selectFrom('lineageBodies').select('hash').where('projectId', '=', projectId).execute();
    const steps = await server.db
      .selectFrom('lineageSteps')
      .select('bodyHash')
      .where(
        'executionId',
        'in',
        runs.map((run) => run.executionId),
      )
      .where('jobKind', '=', 'STEP')
      .execute();
    assert.equal(steps.length, 2);
    assert.equal(steps[0].bodyHash, steps[1].bodyHash);
    assert.ok(bodies.some((body) => body.hash === steps[0].bodyHash));

    // The rows hold their project without a foreign key: the project's deletion takes them.
    const deleted = await api('DELETE', `/projects/${projectId}`);
    assert.ok(deleted.status < 300, deleted.text);
    assert.deepEqual(await server.db.selectFrom('lineageSteps').select('id').where('projectId', '=', projectId).execute(), []);
    assert.deepEqual(await server.db.selectFrom('lineageBodies').select('hash').where('projectId', '=', projectId).execute(), []);
  });
});
