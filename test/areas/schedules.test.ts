import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, eventually, insertAgent, uploadVersion } from '../helpers/executions.ts';

describeEachStore('schedules', (kind) => {
  let server: TestServer;
  let beside: TestServer;
  let caller: Caller;
  let projectId: string;

  before(async () => {
    server = await TestServer.start(kind, { schedulerIntervalMs: 100, scheduleCatchUpMs: 5000 });
    beside = await TestServer.startBeside(server);
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const agentId = await insertAgent(server, caller.accountId);
    await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: agentId },
    });
    await server.api('POST', `/projects/${projectId}/variables`, {
      token: caller.token,
      body: { name: 'region', type: 'TEXT', behaviour: 'SHARED', value: 'eu' },
    });
    await uploadVersion(server, caller, projectId, 'prod', 'v1', { 'check.orch.yaml': CHECKING });
  });
  after(async () => {
    await beside.server.close();
    await server.close();
  });

  const create = (body: Record<string, unknown>, token = caller.token) =>
    server.api('POST', `/projects/${projectId}/schedules`, {
      token,
      body: { environmentName: 'prod', pipelineName: 'check', ...body },
    });
  const runsOf = (scheduleId: string) =>
    server.db
      .selectFrom('executions')
      .select(['status', 'trigger', 'scheduleId', 'scheduledFor', 'message'])
      .where('scheduleId', '=', scheduleId)
      .execute();

  test('create, read, list, update, disable and delete; bad expressions and time zones are 400', async () => {
    const created = await create({
      name: 'nightly',
      cronExpression: '0 2 * * *',
      timezone: 'Europe/Paris',
      scheduleEnabled: false,
    });
    assert.equal(created.status, 201, created.text);
    const { scheduleId } = created.body;
    assert.equal(created.body.nextRunAt, null);
    assert.match(created.headers.get('location')!, new RegExp(`/schedules/${scheduleId}$`));
    expectProblem(await create({ name: 'nightly', cronExpression: '0 2 * * *' }), 409);
    const bad = expectProblem(await create({ name: 'bad', cronExpression: 'every day', timezone: 'Mars/Olympus' }), 400);
    assert.equal(bad.violations!.length, 2);
    expectProblem(await create({ name: 'nowhere', cronExpression: '* * * * *', environmentName: 'nowhere' }), 404);
    const viewer = await server.tokenFor(caller.accountId, 'viewer');
    expectProblem(await create({ name: 'viewer', cronExpression: '* * * * *' }, viewer), 403);

    const enabled = await server.api('PATCH', `/projects/${projectId}/schedules/${scheduleId}`, {
      token: caller.token,
      body: { scheduleEnabled: true },
    });
    assert.equal(enabled.status, 200, enabled.text);
    // 02:00 in Paris is 00:00 or 01:00 UTC depending on the season.
    assert.match(enabled.body.nextRunAt, /T0[01]:00:00\.000Z$/);
    const page = await server.api('GET', `/projects/${projectId}/schedules?size=10`, { token: caller.token });
    assert.deepEqual(page.body.results, [
      {
        scheduleId,
        name: 'nightly',
        pipelineName: 'check',
        cronExpression: '0 2 * * *',
        scheduleEnabled: true,
        environmentName: 'prod',
      },
    ]);
    assert.equal(page.body.total, 1);
    expectProblem(
      await server.api('PATCH', `/projects/${projectId}/schedules/${scheduleId}`, {
        token: caller.token,
        body: { cronExpression: '61 * * * *' },
      }),
      400,
    );
    const deleted = await server.api('DELETE', `/projects/${projectId}/schedules/${scheduleId}`, { token: caller.token });
    assert.equal(deleted.status, 204);
    expectProblem(await server.api('GET', `/projects/${projectId}/schedules/${scheduleId}`, { token: caller.token }), 404);
  });

  test('due times start runs with trigger SCHEDULE and scheduleId, each once across two instances; SKIPPED while the last run goes', async () => {
    const { scheduleId } = (await create({ name: 'every second', cronExpression: '* * * * * *' })).body;
    const runs = await eventually(
      () => runsOf(scheduleId),
      (rows) => rows.length >= 3,
    );
    await server.api('PATCH', `/projects/${projectId}/schedules/${scheduleId}`, {
      token: caller.token,
      body: { scheduleEnabled: false },
    });
    const all = await runsOf(scheduleId);
    assert.ok(runs.length >= 3);
    // Both instances tick every 100 ms; each due second has one run.
    assert.equal(new Set(all.map((run) => run.scheduledFor)).size, all.length, JSON.stringify(all));
    assert.equal(all.filter((run) => run.status === 'RUNNING').length, 1, JSON.stringify(all));
    assert.ok(all.every((run) => run.trigger === 'SCHEDULE' && run.scheduleId === scheduleId));
    assert.match(all.find((run) => run.status === 'SKIPPED')!.message!, /previous run is still going/);
    const list = await server.api('GET', `/pipeline-executions?projectId=${projectId}&limit=1000`, { token: caller.token });
    assert.ok(
      list.body.results.some(
        (run: { scheduleId: string | null; trigger: string }) => run.scheduleId === scheduleId && run.trigger === 'SCHEDULE',
      ),
    );
  });

  test('due times missed while no server ran are not run in a burst: past the catch-up window, none is run', async () => {
    const { scheduleId } = (await create({ name: 'new year', cronExpression: '0 0 1 1 *', timezone: 'UTC' })).body;
    // As if the servers were down for three years: the due times since were all missed.
    await server.db
      .updateTable('schedules')
      .set({ nextRunAt: '2020-01-01T00:00:00.000Z' })
      .where('id', '=', scheduleId)
      .execute();
    const moved = await eventually(
      () => server.db.selectFrom('schedules').select('nextRunAt').where('id', '=', scheduleId).executeTakeFirstOrThrow(),
      (row) => row.nextRunAt! > new Date().toISOString(),
    );
    assert.ok(moved.nextRunAt! > new Date().toISOString());
    assert.deepEqual(await runsOf(scheduleId), []);
  });
});
