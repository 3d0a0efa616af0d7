import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('audit events', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
  });
  after(() => server.close());

  test('every successful write is recorded, newest first; reads and failures are not', async () => {
    const start = new Date().toISOString();
    const projectId = await server.newProject(caller, 'audited');
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } }); // 409
    await server.api('GET', `/projects/${projectId}`, { token: caller.token });
    const events = await server.api('GET', `/events?projectId=${projectId}`, { token: caller.token });
    assert.equal(events.status, 200);
    assert.equal(events.body.total, 2);
    const [environment, project] = events.body.results;
    assert.equal(environment.method, 'POST');
    assert.equal(environment.route, '/dpc/v1/projects/:projectId/environments');
    assert.equal(environment.status, 201);
    assert.equal(environment.clientId, caller.clientId);
    assert.deepEqual(environment.resourceIds, { projectId, environmentName: 'dev' });
    assert.equal(project.route, '/dpc/v1/projects');
    assert.equal(project.projectId, projectId);
    assert.ok(project.occurredAt >= start);
    assert.ok(environment.id > project.id);
  });

  test('filters by time range; never shows another account', async () => {
    const before = new Date(Date.now() - 1000).toISOString();
    await server.newProject(caller);
    const recent = await server.api('GET', `/events?from=${encodeURIComponent(before)}`, { token: caller.token });
    assert.ok(recent.body.total >= 1);
    const none = await server.api(
      'GET',
      `/events?to=${encodeURIComponent(before)}&from=${encodeURIComponent('2000-01-01T00:00:00Z')}`,
      { token: caller.token },
    );
    assert.ok(none.body.results.every((e: { occurredAt: string }) => e.occurredAt < before));
    const stranger = await server.newAccount();
    assert.equal((await server.api('GET', '/events', { token: stranger.token })).body.total, 0);
    expectProblem(await server.api('GET', '/events?from=yesterday', { token: caller.token }), 400);
    expectProblem(
      await server.api('GET', `/events?from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z`, { token: caller.token }),
      400,
    );
  });

  test('writes answered at once are each in the trail before their answer, from two accounts', async () => {
    const other = await server.newAccount();
    const callers = [caller, other];
    const projectIds = await Promise.all(Array.from({ length: 10 }, (_, i) => server.newProject(callers[i % 2])));
    // Thirty variables created at once, each in a project of its own account; as each answer arrives,
    // its event must already be readable.
    await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        const projectId = projectIds[i % 10];
        const token = callers[i % 2].token;
        const created = await server.api('POST', `/projects/${projectId}/variables`, {
          token,
          body: { name: `v${i}`, type: 'TEXT', behaviour: 'SHARED', value: 'x' },
        });
        assert.equal(created.status, 201, created.text);
        const events = await server.api('GET', `/events?projectId=${projectId}`, { token });
        const names = events.body.results.map((e: { resourceIds: { variableName?: string } }) => e.resourceIds.variableName);
        assert.ok(names.includes(`v${i}`), `v${i} not in ${JSON.stringify(names)}`);
      }),
    );
    for (const [i, projectId] of projectIds.entries()) {
      const events = await server.api('GET', `/events?projectId=${projectId}`, { token: callers[i % 2].token });
      assert.equal(events.body.total, 4, events.text); // the project and its three variables
      assert.ok(events.body.results.every((e: { clientId: string }) => e.clientId === callers[i % 2].clientId));
    }
  });

  test('request bodies never reach the trail', async () => {
    const secretish = 'very-secret-description-value';
    await server.api('POST', '/projects', { token: caller.token, body: { name: 'with description', description: secretish } });
    const rows = await server.db.selectFrom('auditEvents').selectAll().execute();
    assert.ok(!JSON.stringify(rows).includes(secretish));
  });
});
