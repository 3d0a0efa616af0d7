import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, eventually, insertAgent, orchestration, uploadVersion, WAITING } from '../helpers/executions.ts';
import { claimAgentWork, recordAgentWorkReport, renewAgentWork } from '../../src/areas/agents/work.ts';
import { ProblemError } from '../../src/core/problems.ts';
import { workHandler } from '../../src/agent/handlers.ts';
import { WorkFailure, type WorkContext } from '../../src/agent/work-context.ts';
import { sweepExecutions } from '../../src/areas/executions/lifecycle.ts';

const LEASE_MS = 60_000;

/**
 * The reference agent's loop in this process, over the agent-work contract (claim, renew, report), with
 * the reference agent's own handlers. `server` is read each time, so that it follows a restart.
 */
class Agent {
  private stopped = false;
  private loop: Promise<void> | undefined;
  /** Set to drop every report from now on, as an agent process that died would. */
  silent = false;
  private readonly runs = new Set<AbortController>();

  constructor(
    private readonly server: () => TestServer,
    readonly agentId: string,
  ) {}

  start(): void {
    this.stopped = false;
    this.loop = (async () => {
      while (!this.stopped) {
        // A call cut off by a server closing under it is retried, as the agent process retries.
        if (!(await this.once().catch(() => false))) await new Promise((resolve) => setTimeout(resolve, 30));
      }
    })();
  }

  /** Stops taking work; work in hand goes on unless `crash` (then it stops without a word). */
  async stop(crash = false): Promise<void> {
    this.stopped = true;
    if (crash) {
      this.silent = true;
      for (const run of this.runs) run.abort();
    }
    await this.loop;
  }

  /**
   * Reports through the current server; a report that fails because its server stopped under it (the restart
   * test swaps servers mid-run) is sent again through the one current then, as a real agent retries.
   */
  private async report(workId: string, type: 'progress' | 'done' | 'failed', body: unknown): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      if (this.silent) return;
      const { db, server } = this.server();
      try {
        await recordAgentWorkReport(db, this.agentId, workId, { type, body }, LEASE_MS, server.app.agentWorkReports);
        return;
      } catch (error) {
        if (error instanceof ProblemError || attempt >= 5) throw error;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }

  /** Takes one piece of work and runs it in the background; false when there was none. */
  async once(): Promise<boolean> {
    const { db, server } = this.server();
    const work = await claimAgentWork(db, server.app.store.dialect, this.agentId, LEASE_MS);
    if (!work) return false;
    const controller = new AbortController();
    this.runs.add(controller);
    const watch = setInterval(() => {
      renewAgentWork(this.server().db, this.agentId, [{ workId: work.id }], LEASE_MS)
        .then(({ cancelledWorkIds }) => cancelledWorkIds.includes(work.id) && controller.abort())
        .catch(() => undefined);
    }, 50);
    const ctx = {
      report: (body: unknown) => this.report(work.id, 'progress', body),
      signal: controller.signal,
      log: () => undefined,
    } as unknown as WorkContext;
    void workHandler(work.kind)!({ workId: work.id, kind: work.kind, payload: work.payload, delivery: work.deliveries }, ctx)
      .then(
        (result) => this.report(work.id, 'done', result),
        (error: Error) =>
          this.report(work.id, 'failed', { message: error.message, ...(error instanceof WorkFailure && { code: error.code }) }),
      )
      .catch(() => undefined)
      .finally(() => {
        clearInterval(watch);
        this.runs.delete(controller);
      });
    return true;
  }
}

describeEachStore('pipeline and test executions', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let agentId: string;
  let agent: Agent;
  const env = 'test';

  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    agentId = await insertAgent(server, caller.accountId);
    const created = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: env, defaultAgentId: agentId },
    });
    assert.equal(created.status, 201, created.text);
    for (const [name, type, value] of [
      ['region', 'TEXT', 'us'],
      ['delay', 'NUMBER', 0],
    ] as const) {
      const answer = await server.api('POST', `/projects/${projectId}/variables`, {
        token: caller.token,
        body: { name, type, behaviour: 'SHARED', value },
      });
      assert.equal(answer.status, 201, answer.text);
    }
    // The environment overrides the project default; a run's own value overrides both.
    await server.api('POST', `/projects/${projectId}/variables/region/environment-overrides`, {
      token: caller.token,
      body: [{ environmentName: env, value: 'eu' }],
    });
    await uploadVersion(server, caller, projectId, env, 'v1', {
      'pipelines/check.orch.yaml': CHECKING,
      'pipelines/wait.orch.yaml': WAITING,
      'pipelines/check.test.orch.yaml': CHECKING,
      'pipelines/broken.orch.yaml': 'type: transformation\npipeline:\n  components: {}\n',
      'pipelines/unsupported.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Load"]
    Load:
      type: "s3-load"
`),
      'pipelines/invalid.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Load"]
    Load:
      type: "sql-executor"
      transitions:
        success: ["Child"]
    Child:
      type: "run-orchestration"
      parameters:
        orchestrationJob: "pipelines/missing"
`),
      'pipelines/cyclic.tran.yaml':
        'type: "transformation"\npipeline:\n  components:\n    A:\n      type: "filter"\n      sources: ["B"]\n    B:\n      type: "filter"\n      sources: ["A"]\n',
      'pipelines/runs-cyclic.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["T"]
    T:
      type: "run-transformation"
      parameters:
        transformationJob: "pipelines/cyclic"
`),
    });
    agent = new Agent(() => server, agentId);
    agent.start();
  });
  after(async () => {
    await agent.stop();
    await server.close();
  });

  const start = (body: Record<string, unknown>, token = caller.token) =>
    server.api('POST', `/projects/${projectId}/pipeline-executions`, { token, body: { environmentName: env, ...body } });
  const status = async (id: string) =>
    (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token: caller.token })).body.status;
  const settled = (id: string, wanted: string) =>
    eventually(
      () => status(id),
      (value) => value === wanted,
    );
  const steps = async (id: string, query = '') =>
    (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps${query}`, { token: caller.token })).body;
  const cancel = (id: string, body: Record<string, unknown>) =>
    server.api('PATCH', `/projects/${projectId}/pipeline-executions/${id}`, { token: caller.token, body });

  test('a pipeline that succeeds: 201 with its id, RUNNING then SUCCESS, its steps, details and Location', async () => {
    const answer = await start({ pipelineName: 'pipelines/check' });
    assert.equal(answer.status, 201, answer.text);
    const id = answer.body.pipelineExecutionId;
    assert.match(answer.headers.get('location')!, new RegExp(`/pipeline-executions/${id}$`));
    assert.equal(await settled(id, 'SUCCESS'), 'SUCCESS');
    const page = await steps(id);
    assert.equal(page.total, 4);
    assert.deepEqual(
      page.results.map((step: { id: string; name: string; result: { status: string } }) => [
        step.id,
        step.name,
        step.result.status,
      ]),
      [
        ['0', 'Start', 'SUCCESS'],
        ['1', 'Print', 'SUCCESS'],
        ['2', 'Check region', 'SUCCESS'],
        ['3', 'End Success', 'SUCCESS'],
      ],
    );
    assert.equal(page.results[1].result.message, 'delay=0\nregion=eu');
    assert.deepEqual(Object.keys(page.results[0]).sort(), ['childPipeline', 'id', 'name', 'result']);
    assert.deepEqual((await steps(id, '?page=1&size=3')).results.length, 1);
    const details = await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}`, { token: caller.token });
    assert.equal(details.body.pipelineName, 'pipelines/check.orch.yaml');
    assert.equal(details.body.agentId, agentId);
    assert.equal(details.body.versionName, 'v1');
    assert.equal(details.body.trigger, 'API');
    assert.ok(details.body.finishedAt >= details.body.startedAt);
  });

  test('a pipeline that fails at a step: FAILED, the failing step says why', async () => {
    const answer = await start({ pipelineName: 'pipelines/check.orch.yaml', scalarVariables: { region: 'us' } });
    assert.equal(answer.status, 201, answer.text);
    const id = answer.body.pipelineExecutionId;
    assert.equal(await settled(id, 'FAILED'), 'FAILED');
    const check = (await steps(id)).results.find((step: { name: string }) => step.name === 'Check region');
    assert.equal(check.result.status, 'FAILED');
    assert.match(check.result.message, /region is us, expected == eu/);

    const unsupported = (await start({ pipelineName: 'pipelines/unsupported' })).body.pipelineExecutionId;
    assert.equal(await settled(unsupported, 'FAILED'), 'FAILED');
    assert.match((await steps(unsupported)).results[1].result.message, /"s3-load" is not supported/);
  });

  test('cancelled while waiting: CANCELLING, then CANCELLED once the agent stops; the wait is interrupted', async () => {
    const id = (await start({ pipelineName: 'pipelines/wait', scalarVariables: { delay: 60 } })).body.pipelineExecutionId;
    await eventually(
      () => steps(id),
      (page) =>
        page.results.some(
          (step: { name: string; result: { status: string } }) => step.name === 'Wait' && step.result.status === 'RUNNING',
        ),
    );
    const answer = await cancel(id, { forceUpdate: false, status: 'CANCELLED' });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body, { pipelineExecutionId: id, status: 'CANCELLING' });
    assert.equal(await settled(id, 'CANCELLED'), 'CANCELLED');
    const wait = (await steps(id)).results.find((step: { name: string }) => step.name === 'Wait');
    assert.equal(wait.result.status, 'CANCELLED');
    // A finished run cannot be cancelled, and no status but CANCELLED may be asked for.
    expectProblem(await cancel(id, { status: 'CANCELLED' }), 409);
    expectProblem(await cancel(id, { status: 'SUCCESS' }), 400);
  });

  test('force-cancelled with the agent stopped: CANCELLED at once; a late report cannot revive it', async () => {
    const quiet = new Agent(() => server, await insertAgent(server, caller.accountId));
    const id = (await start({ pipelineName: 'pipelines/wait', agentId: quiet.agentId, scalarVariables: { delay: 60 } })).body
      .pipelineExecutionId;
    assert.ok(await quiet.once());
    await quiet.stop(true);
    const answer = await cancel(id, { forceUpdate: true, status: 'CANCELLED' });
    assert.deepEqual(answer.body, { pipelineExecutionId: id, status: 'CANCELLED' });
    const { agentWorkId } = await server.db
      .selectFrom('executions')
      .select('agentWorkId')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    // The agent comes back and says it finished: the work is closed, the run stays CANCELLED.
    await recordAgentWorkReport(
      server.db,
      quiet.agentId,
      agentWorkId!,
      { type: 'done', body: {} },
      LEASE_MS,
      server.server.app.agentWorkReports,
    ).catch(() => undefined);
    assert.equal(await status(id), 'CANCELLED');
  });

  test('an executionTag runs once at a time: 409 while it runs, free again once it finished', async () => {
    const idle = await insertAgent(server, caller.accountId);
    const first = await start({ pipelineName: 'pipelines/wait', agentId: idle, executionTag: 'nightly' });
    assert.equal(first.status, 201, first.text);
    expectProblem(await start({ pipelineName: 'pipelines/check', executionTag: 'nightly' }), 409);
    // Work no agent picked up yet is withdrawn by a plain cancel: CANCELLED at once.
    const cancelled = await cancel(first.body.pipelineExecutionId, { status: 'CANCELLED' });
    assert.equal(cancelled.body.status, 'CANCELLED');
    const again = await start({ pipelineName: 'pipelines/check', executionTag: 'nightly' });
    assert.equal(again.status, 201, again.text);
  });

  test('an agent out of contact past the window makes the run UNKNOWN; its late report resolves it', async () => {
    const late = new Agent(() => server, await insertAgent(server, caller.accountId));
    const id = (await start({ pipelineName: 'pipelines/wait', agentId: late.agentId, scalarVariables: { delay: 0 } })).body
      .pipelineExecutionId;
    late.silent = true;
    assert.ok(await late.once());
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok((await sweepExecutions(server.db, 10)) >= 1);
    assert.equal(await status(id), 'UNKNOWN');
    const { agentWorkId } = await server.db
      .selectFrom('executions')
      .select('agentWorkId')
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    await recordAgentWorkReport(
      server.db,
      late.agentId,
      agentWorkId!,
      { type: 'done', body: { message: 'finished offline' } },
      LEASE_MS,
      server.server.app.agentWorkReports,
    );
    assert.equal(await status(id), 'SUCCESS');
  });

  test('refusals: unknown pipeline, environment or execution 404, disabled version 410, unrunnable file 422, bad variables 400, viewer 403', async () => {
    expectProblem(await start({ pipelineName: 'pipelines/nowhere' }), 404);
    expectProblem(await start({ pipelineName: 'pipelines/check', environmentName: 'nowhere' }), 404);
    expectProblem(await start({ pipelineName: 'pipelines/check', versionName: 'v9' }), 404);
    expectProblem(await start({ pipelineName: 'pipelines/broken' }), 422);
    // A graph that cannot run is refused when the run starts, naming the component and the parameter.
    const invalid = expectProblem(await start({ pipelineName: 'pipelines/invalid' }), 400);
    assert.deepEqual(invalid.violations, [
      'pipelines/invalid.orch.yaml: components.Load.parameters.sqlScript: required',
      'pipelines/invalid.orch.yaml: components.Child.parameters.orchestrationJob: "pipelines/missing" is not a pipeline of this version',
    ]);
    const cyclic = expectProblem(await start({ pipelineName: 'pipelines/runs-cyclic' }), 400);
    assert.match(
      cyclic.violations![0],
      /^pipelines\/cyclic\.tran\.yaml: components\.[AB]\.parameters\.sources: Components form a cycle/,
    );
    const bad = expectProblem(
      await start({
        pipelineName: 'pipelines/check',
        scalarVariables: { region: 5, delay: 'soon', ghost: 'x' },
        gridVariables: { g: [['a']] },
      }),
      400,
    );
    assert.deepEqual(bad.violations!.sort(), [
      'gridVariables.g: not a GRID variable of the pipeline',
      'scalarVariables.delay: must be a number for a NUMBER variable',
      'scalarVariables.ghost: not a project variable',
      'scalarVariables.region: must be a string for a TEXT variable',
    ]);
    expectProblem(await start({ pipelineName: 'pipelines/check', agentId: '00000000-0000-4000-8000-000000000000' }), 404);
    const viewer = await server.tokenFor(caller.accountId, 'viewer');
    expectProblem(await start({ pipelineName: 'pipelines/check' }, viewer), 403);
    expectProblem(
      await server.api('GET', `/projects/${projectId}/pipeline-executions/00000000-0000-4000-8000-000000000000/status`, {
        token: caller.token,
      }),
      404,
    );
    await uploadVersion(server, caller, projectId, env, 'v0', { 'pipelines/check.orch.yaml': CHECKING });
    await server.api('PATCH', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: { environmentName: env, versionName: 'v0', enabled: false },
    });
    expectProblem(await start({ pipelineName: 'pipelines/check', versionName: 'v0' }), 410, 'gone');
    // Another account sees nothing of this project's runs.
    const other = await server.newAccount('other');
    const id = (await start({ pipelineName: 'pipelines/check' })).body.pipelineExecutionId;
    expectProblem(
      await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token: other.token }),
      404,
    );
    assert.deepEqual((await server.api('GET', '/pipeline-executions', { token: other.token })).body, { results: [], more: null });
  });

  test('the account list: filters, newest first, token paging to the end', async () => {
    const all: string[] = [];
    let token: string | null = null;
    do {
      const query: string = `?limit=2&projectId=${projectId}${token ? `&paginationToken=${encodeURIComponent(token)}` : ''}`;
      const page = await server.api('GET', `/pipeline-executions${query}`, { token: caller.token });
      assert.equal(page.status, 200, page.text);
      assert.ok(page.body.results.length <= 2);
      all.push(...page.body.results.map((run: { pipelineExecutionId: string }) => run.pipelineExecutionId));
      token = page.body.more;
    } while (token);
    const everything = (await server.api('GET', '/pipeline-executions?limit=1000', { token: caller.token })).body;
    assert.equal(everything.more, null);
    assert.deepEqual(
      all,
      everything.results.map((run: { pipelineExecutionId: string }) => run.pipelineExecutionId),
    );
    const starts = everything.results.map((run: { startedAt: string }) => run.startedAt);
    assert.deepEqual(starts, [...starts].sort().reverse());
    const item = everything.results[0];
    assert.deepEqual(Object.keys(item).sort(), [
      'environmentName',
      'finishedAt',
      'message',
      'pipelineExecutionId',
      'pipelineName',
      'pipelineType',
      'projectId',
      'scheduleId',
      'startedAt',
      'status',
      'trigger',
    ]);
    const failed = (
      await server.api('GET', '/pipeline-executions?status=FAILED&pipelineName=pipelines/check', { token: caller.token })
    ).body;
    assert.ok(failed.results.length >= 1);
    assert.ok(
      failed.results.every(
        (run: { status: string; pipelineName: string }) =>
          run.status === 'FAILED' && run.pipelineName === 'pipelines/check.orch.yaml',
      ),
    );
    const future = (
      await server.api('GET', `/pipeline-executions?startedAfter=${encodeURIComponent('2999-01-01T00:00:00Z')}`, {
        token: caller.token,
      })
    ).body;
    assert.deepEqual(future.results, []);
    expectProblem(await server.api('GET', '/pipeline-executions?paginationToken=nonsense', { token: caller.token }), 400);
    expectProblem(await server.api('GET', '/pipeline-executions?status=DONE', { token: caller.token }), 400);
  });

  test('test executions: scopes, status and results, and the E22 cancel answering {testExecutionId}', async () => {
    const startTest = (body: Record<string, unknown>) =>
      server.api('POST', `/projects/${projectId}/test-executions`, {
        token: caller.token,
        body: { environmentName: env, ...body },
      });
    const read = async (id: string) =>
      (await server.api('GET', `/projects/${projectId}/test-executions/${id}`, { token: caller.token })).body;
    const pipelineScope = await startTest({ scope: 'PIPELINE', pipelineName: 'pipelines/check' });
    assert.equal(pipelineScope.status, 201, pipelineScope.text);
    const id = pipelineScope.body.testExecutionId;
    const done = await eventually(
      () => read(id),
      (run) => run.status === 'SUCCESS',
    );
    assert.equal(done.status, 'SUCCESS');
    assert.equal(done.scope, 'PIPELINE');
    const results = (await server.api('GET', `/projects/${projectId}/test-executions/${id}/steps`, { token: caller.token })).body;
    assert.equal(results.total, 4);
    assert.equal(await (await startTest({ scope: 'TEST', testName: 'pipelines/check' })).status, 201);
    expectProblem(await startTest({ scope: 'TEST' }), 400);
    expectProblem(await startTest({ scope: 'PIPELINE', pipelineName: 'pipelines/wait' }), 404);

    const patch = (body: Record<string, unknown>) =>
      server.api('PATCH', `/projects/${projectId}/test-executions/${id}`, { token: caller.token, body });
    expectProblem(await patch({ forceUpdate: true, status: 'RUNNING' }), 400);
    expectProblem(await patch({ forceUpdate: true, status: 'CANCELLED' }), 409);
    const idle = await insertAgent(server, caller.accountId);
    const pending = (await startTest({ scope: 'PROJECT', agentId: idle })).body.testExecutionId;
    const answer = await server.api('PATCH', `/projects/${projectId}/test-executions/${pending}`, {
      token: caller.token,
      body: { forceUpdate: true, status: 'CANCELLED' },
    });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body, { testExecutionId: pending });
    assert.equal((await read(pending)).status, 'CANCELLED');
  });
});

describeEachStore('executions survive a server restart', (kind) => {
  test('a run started before the restart is finished through the new server', async () => {
    const first = await TestServer.start(kind);
    let current = first;
    const caller = await first.newAccount();
    const projectId = await first.newProject(caller);
    const agentId = await insertAgent(first, caller.accountId);
    await first.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: agentId },
    });
    await first.api('POST', `/projects/${projectId}/variables`, {
      token: caller.token,
      body: { name: 'delay', type: 'NUMBER', behaviour: 'SHARED', value: 1 },
    });
    await uploadVersion(first, caller, projectId, 'prod', 'v1', { 'wait.orch.yaml': WAITING });
    const agent = new Agent(() => current, agentId);
    try {
      const started = await first.api('POST', `/projects/${projectId}/pipeline-executions`, {
        token: caller.token,
        body: { pipelineName: 'wait', environmentName: 'prod' },
      });
      const id = started.body.pipelineExecutionId;
      agent.start();
      await eventually(
        async () =>
          (await first.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps`, { token: caller.token })).body.total,
        (total) => total >= 2,
      );
      // A new process over the same store takes over; the old one stops mid-run.
      current = await TestServer.startBeside(first);
      await first.server.close();
      const token = await current.token(caller.clientId, caller.clientSecret);
      const final = await eventually(
        async () => (await current.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token })).body.status,
        (value) => value === 'SUCCESS',
      );
      assert.equal(final, 'SUCCESS');
      const steps = (await current.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps`, { token })).body;
      assert.deepEqual(
        steps.results.map((step: { name: string; result: { status: string } }) => `${step.name}:${step.result.status}`),
        ['Start:SUCCESS', 'Wait:SUCCESS', 'End Success:SUCCESS'],
      );
    } finally {
      await agent.stop();
      if (current !== first) await current.server.close();
      await first.close();
    }
  });
});
