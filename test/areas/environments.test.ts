import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('environments', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, projectId } = await server.prologue());
  });
  after(() => server.close());

  const create = (body: unknown, id = projectId) =>
    server.api('POST', `/projects/${id}/environments`, { token: caller.token, body });

  const newAgent = async (token = caller.token) => {
    const created = await server.api('POST', '/agents', {
      token,
      body: {
        name: `agent-${Math.random().toString(36).slice(2)}`,
        agentType: 'CUSTOMER_HOSTED',
        cloudProvider: 'aws',
        deployment: 'fargate',
      },
    });
    assert.equal(created.status, 201, created.text);
    return created.body.agentId as string;
  };

  test('create answers the environment; list is paged by name', async () => {
    const agentId = await newAgent();
    const created = await create({ name: 'prod', description: 'live', defaultAgentId: agentId });
    assert.equal(created.status, 201);
    assert.equal(created.body.name, 'prod');
    assert.equal(created.body.defaultAgentId, agentId);
    await create({ name: 'dev' });
    const list = await server.api('GET', `/projects/${projectId}/environments?size=1`, { token: caller.token });
    assert.equal(list.body.total, 2);
    assert.equal(list.body.size, 1);
    assert.deepEqual(
      list.body.results.map((e: { name: string }) => e.name),
      ['dev'],
    );
  });

  test('names follow the specification pattern and bounds', async () => {
    for (const name of ['a', 'Test (EU) 1', 'x'.repeat(255), 'my_env-2', '_'])
      assert.equal((await create({ name })).status, 201, name);
    for (const name of ['', '-lead', 'trail-', 'x'.repeat(256), 'dot.ted', 'slash/ed']) {
      const problem = expectProblem(await create({ name }), 400, 'bad-request');
      assert.ok(
        problem.violations!.every((v) => v.startsWith('body.name: ')),
        name,
      );
    }
    expectProblem(await create({ name: 'ok', defaultAgentId: 'not-a-uuid' }), 400);
  });

  test("defaultAgentId must name an agent of the caller's account: 404 otherwise, and nothing is stored (issue 36)", async () => {
    const stranger = await server.newAccount();
    for (const defaultAgentId of ['0d8f2f4e-3c55-4f0e-9d6e-6c4c2a1f7b10', await newAgent(stranger.token)]) {
      const problem = expectProblem(await create({ name: 'pinned', defaultAgentId }), 404);
      assert.match(problem.detail, new RegExp(`Agent ${defaultAgentId} does not exist`));
      assert.ok(!problem.detail.includes(stranger.accountId));
    }
    const list = await server.api('GET', `/projects/${projectId}/environments?size=100`, { token: caller.token });
    assert.ok(!list.body.results.some((e: { name: string }) => e.name === 'pinned'));
    assert.equal((await create({ name: 'pinned', defaultAgentId: await newAgent() })).status, 201);
  });

  test('names are unique per project (409)', async () => {
    await create({ name: 'twice' });
    expectProblem(await create({ name: 'twice' }), 409, 'conflict');
    const other = await server.newProject(caller);
    assert.equal((await create({ name: 'twice' }, other)).status, 201);
  });

  test('delete removes one environment; an unknown one is 404', async () => {
    await create({ name: 'gone' });
    assert.equal((await server.api('DELETE', `/projects/${projectId}/environments/gone`, { token: caller.token })).status, 204);
    expectProblem(await server.api('DELETE', `/projects/${projectId}/environments/gone`, { token: caller.token }), 404);
    expectProblem(await server.api('DELETE', `/projects/${projectId}/environments/-bad`, { token: caller.token }), 400);
  });
});
