import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('projects', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let stranger: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount('acme');
    stranger = await server.newAccount('other');
  });
  after(() => server.close());

  test('create answers 201 {projectId}; get answers the project', async () => {
    const created = await server.api('POST', '/projects', { token: caller.token, body: { name: 'Sales', description: 'team' } });
    assert.equal(created.status, 201);
    assert.match(created.body.projectId, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    const got = await server.api('GET', `/projects/${created.body.projectId}`, { token: caller.token });
    assert.equal(got.status, 200);
    assert.deepEqual(
      { ...got.body, createdAt: undefined },
      { id: created.body.projectId, name: 'Sales', description: 'team', createdAt: undefined },
    );
    assert.ok(!Number.isNaN(Date.parse(got.body.createdAt)));
  });

  test('names are unique per account (409), not across accounts', async () => {
    await server.newProject(caller, 'dup');
    expectProblem(await server.api('POST', '/projects', { token: caller.token, body: { name: 'dup' } }), 409, 'conflict');
    assert.equal((await server.api('POST', '/projects', { token: stranger.token, body: { name: 'dup' } })).status, 201);
  });

  test('name bounds: 1 and 255 characters pass, 0 and 256 do not', async () => {
    for (const name of ['a', 'b'.repeat(255)]) {
      assert.equal((await server.api('POST', '/projects', { token: caller.token, body: { name } })).status, 201);
    }
    for (const [name, violation] of [
      ['', 'body.name: must NOT have fewer than 1 characters'],
      ['c'.repeat(256), 'body.name: must NOT have more than 255 characters'],
    ]) {
      const problem = expectProblem(await server.api('POST', '/projects', { token: caller.token, body: { name } }), 400);
      assert.deepEqual(problem.violations, [violation]);
    }
  });

  test('list is paged: defaults 0 and 25, size at most 100', async () => {
    const account = await server.newAccount('pager');
    for (let i = 0; i < 30; i += 1) await server.newProject(account, `p${String(i).padStart(2, '0')}`);
    const first = await server.api('GET', '/projects', { token: account.token });
    assert.equal(first.status, 200);
    assert.equal(first.body.page, 0);
    assert.equal(first.body.size, 25);
    assert.equal(first.body.total, 30);
    assert.equal(first.body.results.length, 25);
    assert.equal(first.body.results[0].name, 'p00');
    const second = await server.api('GET', '/projects?page=1&size=25', { token: account.token });
    assert.deepEqual(
      second.body.results.map((p: { name: string }) => p.name),
      ['p25', 'p26', 'p27', 'p28', 'p29'],
    );
    const past = await server.api('GET', '/projects?page=9', { token: account.token });
    assert.deepEqual({ ...past.body }, { page: 9, results: [], size: 25, total: 30 });
    expectProblem(await server.api('GET', '/projects?size=0', { token: account.token }), 400);
    expectProblem(await server.api('GET', '/projects?page=x', { token: account.token }), 400);
  });

  test("another account's project is answered as if it did not exist", async () => {
    const projectId = await server.newProject(caller);
    const missing = '00000000-0000-4000-8000-000000000000';
    for (const id of [projectId, missing]) {
      const problem = expectProblem(await server.api('GET', `/projects/${id}`, { token: stranger.token }), 404, 'not-found');
      assert.equal(problem.detail, `Project ${id} does not exist.`);
      expectProblem(await server.api('DELETE', `/projects/${id}`, { token: stranger.token }), 404);
      expectProblem(await server.api('GET', `/projects/${id}/environments`, { token: stranger.token }), 404);
      expectProblem(
        await server.api('POST', `/projects/${id}/environments`, { token: stranger.token, body: { name: 'x' } }),
        404,
      );
    }
    const listed = await server.api('GET', '/projects?size=100', { token: stranger.token });
    assert.ok(!listed.body.results.some((p: { id: string }) => p.id === projectId));
    assert.equal((await server.api('GET', `/projects/${projectId}`, { token: caller.token })).status, 200);
  });

  test('a malformed project id is 400 naming projectId', async () => {
    const problem = expectProblem(await server.api('GET', '/projects/NOT-A-UUID', { token: caller.token }), 400);
    assert.match(problem.violations![0], /^projectId: must match pattern/);
  });

  test('delete (E27) removes the project and everything attached to it', async () => {
    const projectId = await server.newProject(caller);
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
    const deleted = await server.api('DELETE', `/projects/${projectId}`, { token: caller.token });
    assert.equal(deleted.status, 204);
    assert.equal(deleted.text, '');
    expectProblem(await server.api('GET', `/projects/${projectId}`, { token: caller.token }), 404);
    expectProblem(await server.api('DELETE', `/projects/${projectId}`, { token: caller.token }), 404);
    const left = await server.db.selectFrom('environments').select('id').where('projectId', '=', projectId).execute();
    assert.deepEqual(left, []);
  });
});
