import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { loadConfig } from '../../src/core/config.ts';

describeEachStore('consumption', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let projectId: string;
  let otherProject: string;
  let customerAgent: string;
  let hostedAgent: string;
  const environments = new Map<string, string>();

  const api = (method: string, apiPath: string, token = caller.token, body?: unknown) =>
    server.api(method, apiPath, { token, body });

  async function agent(name: string, agentType: string) {
    const created = await api('POST', '/agents', caller.token, { name, agentType, cloudProvider: 'aws', deployment: 'fargate' });
    assert.equal(created.status, 201, created.text);
    return created.body.agentId as string;
  }

  async function environment(project: string, name: string) {
    const created = await api('POST', `/projects/${project}/environments`, caller.token, { name });
    assert.equal(created.status, 201, created.text);
    const row = await server.db
      .selectFrom('environments')
      .select('id')
      .where('projectId', '=', project)
      .where('name', '=', name)
      .executeTakeFirstOrThrow();
    environments.set(`${project}/${name}`, row.id);
  }

  /**
   * A run as the executions area records it: `seconds` long from its agent's first report (`waited` seconds after
   * it started; never, with `reported: false`), started at `startedAt`, its agent's type recorded as `agentType`
   * (none: a run from before types were kept).
   */
  function run(options: {
    project?: string;
    environment?: string;
    agentId: string;
    agentType?: string;
    pipeline?: string;
    status?: string;
    startedAt: string;
    seconds?: number;
    waited?: number;
    reported?: boolean;
    accountId?: string;
  }) {
    const project = options.project ?? projectId;
    const environment = options.environment ?? 'dev';
    const started = Date.parse(options.startedAt);
    const firstReport = started + (options.waited ?? 0) * 1000;
    const finished = options.seconds === undefined ? null : new Date(firstReport + options.seconds * 1000).toISOString();
    const reported = options.reported ?? true;
    return {
      id: randomUUID(),
      accountId: options.accountId ?? caller.accountId,
      projectId: project,
      environmentId: environments.get(`${project}/${environment}`)!,
      environmentName: environment,
      kind: 'PIPELINE',
      pipelineName: options.pipeline ?? 'load.orch.yaml',
      testScope: null,
      testName: null,
      versionName: '[Latest]',
      agentId: options.agentId,
      agentWorkId: null,
      executionTag: null,
      runningTag: null,
      trigger: 'MANUAL',
      scheduleId: null,
      scheduledFor: null,
      status: options.status ?? 'SUCCESS',
      message: null,
      variables: '{}',
      startedAt: new Date(started).toISOString(),
      finishedAt: finished,
      lastReportAt: reported ? (finished ?? new Date(firstReport).toISOString()) : null,
      firstReportAt: reported ? new Date(firstReport).toISOString() : null,
      agentType: options.agentType ?? null,
    };
  }

  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, projectId } = await server.prologue());
    otherProject = await server.newProject(caller, 'marts');
    await environment(projectId, 'dev');
    await environment(projectId, 'prod');
    await environment(otherProject, 'dev');
    customerAgent = await agent('ours', 'CUSTOMER_HOSTED');
    hostedAgent = await agent('theirs', 'PLATFORM_HOSTED');
    await server.db
      .insertInto('executions')
      .values([
        // Day 1: two customer-hosted runs of an hour in dev, one of them failed; one platform-hosted half hour in prod.
        run({ agentId: customerAgent, startedAt: '2026-03-01T10:00:00.000Z', seconds: 3600 }),
        run({ agentId: customerAgent, startedAt: '2026-03-01T23:30:00.000Z', seconds: 3600, status: 'FAILED' }),
        run({
          agentId: hostedAgent,
          environment: 'prod',
          pipeline: 'mart.orch.yaml',
          startedAt: '2026-03-01T12:00:00.000Z',
          seconds: 1800,
        }),
        // Day 2: the other project; a cancelled run counts, its time too.
        run({
          agentId: hostedAgent,
          project: otherProject,
          startedAt: '2026-03-02T00:00:00.000Z',
          seconds: 900,
          status: 'CANCELLED',
        }),
        // Neither counts: one still running, one skipped (it never ran).
        run({ agentId: customerAgent, startedAt: '2026-03-02T08:00:00.000Z', status: 'RUNNING' }),
        run({ agentId: customerAgent, startedAt: '2026-03-02T09:00:00.000Z', seconds: 0, status: 'SKIPPED' }),
        // Outside the window asked for.
        run({ agentId: customerAgent, startedAt: '2026-02-28T23:59:59.999Z', seconds: 60 }),
        run({ agentId: customerAgent, startedAt: '2026-03-03T00:00:00.000Z', seconds: 60 }),
      ])
      .execute();
  });
  after(() => server.close());

  test('per day: finished runs, their seconds and credits by the rate of their agent type', async () => {
    const answer = await api('GET', '/consumption?from=2026-03-01&to=2026-03-02', viewer);
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body.creditsPerHour, { default: 1, CUSTOMER_HOSTED: 1, PLATFORM_HOSTED: 2, streaming: 1 });
    assert.deepEqual(answer.body.results, [
      { date: '2026-03-01', runs: 3, failedRuns: 1, runSeconds: 9000, credits: 3, rowsWritten: null },
      { date: '2026-03-02', runs: 1, failedRuns: 0, runSeconds: 900, credits: 0.5, rowsWritten: null },
    ]);
    assert.deepEqual(answer.body.totals, { runs: 4, failedRuns: 1, runSeconds: 9900, credits: 3.5, rowsWritten: null });
    assert.deepEqual(answer.body.groupBy, []);
  });

  test('per project, environment, agent and pipeline, with their names', async () => {
    const answer = await api('GET', '/consumption?from=2026-03-01&to=2026-03-01&groupBy=pipeline,agent,environment,project');
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body.groupBy, ['project', 'environment', 'agent', 'pipeline']);
    const byEnvironment = Object.fromEntries(answer.body.results.map((row: any) => [row.environmentName, row]));
    assert.equal(answer.body.results.length, 2);
    assert.deepEqual(byEnvironment.dev, {
      date: '2026-03-01',
      projectId,
      projectName: byEnvironment.dev.projectName,
      environmentName: 'dev',
      agentId: customerAgent,
      agentName: 'ours',
      agentType: 'CUSTOMER_HOSTED',
      pipelineName: 'load.orch.yaml',
      runs: 2,
      failedRuns: 1,
      runSeconds: 7200,
      credits: 2,
      rowsWritten: null,
    });
    assert.equal(typeof byEnvironment.dev.projectName, 'string');
    assert.equal(byEnvironment.prod.agentType, 'PLATFORM_HOSTED');
    assert.equal(byEnvironment.prod.credits, 1);

    const perProject = await api('GET', '/consumption?from=2026-03-01&to=2026-03-02&groupBy=project');
    assert.deepEqual(
      perProject.body.results.map((row: any) => [row.date, row.projectName ?? row.projectId, row.runs]),
      [
        ['2026-03-01', byEnvironment.dev.projectName, 3],
        ['2026-03-02', 'marts', 1],
      ],
    );
  });

  test("a run is priced by its agent's type when it ran, from its first report; a run no agent reported on is not counted", async () => {
    const gone = await agent('gone', 'PLATFORM_HOSTED');
    await server.db
      .insertInto('executions')
      .values([
        // Priced as PLATFORM_HOSTED (2 an hour) whatever becomes of its agent.
        run({ agentId: gone, agentType: 'PLATFORM_HOSTED', startedAt: '2026-04-01T00:00:00.000Z', seconds: 3600 }),
        // From before types were kept: by the agent as it is (the default rate once it is gone).
        run({ agentId: gone, startedAt: '2026-04-01T06:00:00.000Z', seconds: 1800 }),
        // Half an hour waiting for an agent, then an hour's work: the hour counts.
        run({ agentId: gone, agentType: 'PLATFORM_HOSTED', startedAt: '2026-04-01T12:00:00.000Z', waited: 1800, seconds: 3600 }),
        // Cancelled while queued: no agent ever reported on it.
        run({
          agentId: gone,
          agentType: 'PLATFORM_HOSTED',
          startedAt: '2026-04-01T18:00:00.000Z',
          seconds: 7200,
          status: 'CANCELLED',
          reported: false,
        }),
      ])
      .execute();
    const before = (await api('GET', '/consumption?from=2026-04-01&to=2026-04-01')).body.totals;
    assert.deepEqual(before, { runs: 3, failedRuns: 0, runSeconds: 9000, credits: 5, rowsWritten: null });
    assert.equal((await api('DELETE', `/agents/${gone}`)).status, 202);
    const answer = await api('GET', '/consumption?from=2026-04-01&to=2026-04-01&groupBy=agent');
    assert.deepEqual(answer.body.results, [
      {
        date: '2026-04-01',
        agentId: gone,
        agentType: 'PLATFORM_HOSTED',
        runs: 3,
        failedRuns: 0,
        runSeconds: 9000,
        credits: 4.5,
        rowsWritten: null,
      },
    ]);

    const rates = loadConfig({ DPC_CREDITS_PER_HOUR: 'PLATFORM_HOSTED=3.5, default=0' }).creditsPerHour;
    assert.deepEqual({ ...rates }, { default: 0, CUSTOMER_HOSTED: 1, PLATFORM_HOSTED: 3.5, streaming: 1 });
    assert.equal(Object.getPrototypeOf(rates), null);
    assert.throws(() => loadConfig({ DPC_CREDITS_PER_HOUR: 'PLATFORM_HOSTED=-1' }), /DPC_CREDITS_PER_HOUR/);
    assert.throws(() => loadConfig({ DPC_CREDITS_PER_HOUR: '__proto__' }), /DPC_CREDITS_PER_HOUR/);
    // A misspelt agent type is refused, not kept beside the real one.
    assert.throws(() => loadConfig({ DPC_CREDITS_PER_HOUR: 'platform_hosted=3' }), /"platform_hosted", which is no agent type/);
  });

  test("another account's runs are never counted", async () => {
    const other = await server.newAccount('other');
    const answer = await api('GET', '/consumption?from=2026-03-01&to=2026-03-02', other.token);
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body.results, []);
    assert.deepEqual(answer.body.totals, { runs: 0, failedRuns: 0, runSeconds: 0, credits: 0, rowsWritten: null });
  });

  test('bad windows and groups are 400 naming the parameter; defaults are the last 30 days', async () => {
    const reversed = expectProblem(await api('GET', '/consumption?from=2026-03-02&to=2026-03-01'), 400);
    assert.deepEqual(reversed.violations, ['to: must not be before from']);
    const long = expectProblem(await api('GET', '/consumption?from=2025-01-01&to=2026-03-01'), 400);
    assert.deepEqual(long.violations, ['from: at most 366 days before to']);
    // `to` not sent: `from` past today is what is wrong.
    const future = expectProblem(
      await api('GET', `/consumption?from=${new Date(Date.now() + 3 * 86_400_000).toISOString().slice(0, 10)}`),
      400,
    );
    assert.deepEqual(future.violations, ['from: must not be after today (the default of to)']);
    const group = expectProblem(await api('GET', '/consumption?groupBy=project,customer'), 400);
    assert.ok(
      group.violations?.some((v) => v.includes('groupBy')),
      JSON.stringify(group.violations),
    );
    expectProblem(await api('GET', '/consumption?from=yesterday'), 400);
    expectProblem(await server.api('GET', '/consumption'), 401);

    const defaults = await api('GET', '/consumption');
    assert.equal(defaults.status, 200, defaults.text);
    const today = new Date().toISOString().slice(0, 10);
    assert.equal(defaults.body.to, today);
    assert.equal((Date.parse(defaults.body.to) - Date.parse(defaults.body.from)) / 86_400_000, 29);
  });
});
