import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('secret references', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, projectId } = await server.prologue());
  });
  after(() => server.close());

  const references = (suffix = '', project = projectId) => `/projects/${project}/secret-references${suffix}`;
  const call = (method: string, path: string, body?: unknown, token = caller.token) => server.api(method, path, { token, body });
  async function create(name: string, body: Record<string, unknown> = {}, project = projectId) {
    const answer = await call('POST', references(`/${name}`, project), { type: 'PASSWORD', secretName: 'vault-secret', ...body });
    assert.equal(answer.status, 201, answer.text);
    return answer.body;
  }
  const names = (answer: { body: { results: { name: string }[] } }) => answer.body.results.map((r) => r.name);

  test('create answers 201 with the reference; a duplicate name is 409', async () => {
    const body = {
      type: 'PASSWORD',
      secretName: 'warehouse',
      secretKey: 'password',
      description: 'Warehouse login',
      vaultName: 'main',
      vaultType: 'AWS_SECRET_MANAGER',
      provider: 'aws',
    };
    const created = await call('POST', references('/warehouse-password'), body);
    assert.equal(created.status, 201);
    assert.deepEqual(created.body, { name: 'warehouse-password', ...body });
    const minimal = await create('minimal');
    assert.deepEqual(minimal, { name: 'minimal', type: 'PASSWORD', secretName: 'vault-secret' });
    expectProblem(await call('POST', references('/warehouse-password'), body), 409, 'conflict');
  });

  test('name pattern: 1 to 128 word characters, parentheses or dashes', async () => {
    for (const name of ['a', 'x(1)-y_z', 'n'.repeat(128)]) await create(name);
    for (const name of ['n'.repeat(129), 'a.b', 'a%20b']) {
      const problem = expectProblem(await call('POST', references(`/${name}`), { type: 'PASSWORD', secretName: 's' }), 400);
      assert.ok(
        problem.violations?.every((v) => v.startsWith('secretReferenceName: ')),
        problem.violations?.join(),
      );
    }
  });

  test('bodies: type from the enum, secretName at least 1 character', async () => {
    const bad = expectProblem(await call('POST', references('/bad'), { type: 'TOKEN', secretName: '' }), 400);
    assert.ok(bad.violations?.some((v) => v.startsWith('body.type')));
    assert.ok(bad.violations?.some((v) => v.startsWith('body.secretName')));
    const missing = expectProblem(await call('POST', references('/bad'), {}), 400);
    assert.deepEqual(missing.violations?.sort(), ['body.secretName: is required', 'body.type: is required']);
  });

  test('E16 answers PASSWORD references unless a type is given; provider filters the other types only', async () => {
    const project = await server.newProject(caller);
    await create('p2', { provider: 'aws' }, project);
    await create('p1', { provider: 'gcp' }, project);
    await create('o1', { type: 'OAUTH_USER_TOKENS', provider: 'salesforce' }, project);
    await create('o2', { type: 'OAUTH_USER_TOKENS', provider: 'google' }, project);
    await create('c1', { type: 'CLOUD_PLATFORM_CREDENTIALS' }, project);
    const passwords = await call('GET', references('', project));
    assert.deepEqual(names(passwords), ['p1', 'p2']);
    assert.equal(passwords.body.total, 2);
    assert.deepEqual(names(await call('GET', references('?provider=aws', project))), ['p1', 'p2'], 'ignored for PASSWORD');
    assert.deepEqual(names(await call('GET', references('?type=OAUTH_USER_TOKENS', project))), ['o1', 'o2']);
    const filtered = await call('GET', references('?type=OAUTH_USER_TOKENS&provider=google', project));
    assert.deepEqual(names(filtered), ['o2']);
    assert.equal(filtered.body.total, 1);
    const paged = await call('GET', references('?type=OAUTH_USER_TOKENS&size=1&page=1', project));
    assert.deepEqual(paged.body, { page: 1, size: 1, total: 2, results: [paged.body.results[0]] });
    assert.equal(paged.body.results[0].name, 'o2');
    const unknown = expectProblem(await call('GET', references('?type=SSH_KEY', project)), 400);
    assert.ok(unknown.violations?.every((v) => v.startsWith('type: ')));
  });

  test('E17 deletes one (204); unknown is 404', async () => {
    await create('doomed');
    assert.equal((await call('DELETE', references('/doomed'))).status, 204);
    expectProblem(await call('DELETE', references('/doomed')), 404, 'not-found');
    assert.ok(!names(await call('GET', references('?size=100'))).includes('doomed'));
  });

  test('deleting the project removes its references', async () => {
    const project = await server.newProject(caller);
    await create('gone', {}, project);
    assert.equal((await call('DELETE', `/projects/${project}`)).status, 204);
    assert.deepEqual(await server.db.selectFrom('secretReferences').select('id').where('projectId', '=', project).execute(), []);
  });

  test('roles and accounts: viewer 403 on writes, another account 404', async () => {
    await create('guarded');
    assert.equal((await call('GET', references(), undefined, viewer)).status, 200);
    expectProblem(await call('POST', references('/x'), { type: 'PASSWORD', secretName: 's' }, viewer), 403, 'forbidden');
    expectProblem(await call('DELETE', references('/guarded'), undefined, viewer), 403);
    const other = (await server.newAccount('other')).token;
    expectProblem(await call('GET', references(), undefined, other), 404);
    expectProblem(await call('POST', references('/x'), { type: 'PASSWORD', secretName: 's' }, other), 404);
    expectProblem(await call('DELETE', references('/guarded'), undefined, other), 404);
    assert.ok(names(await call('GET', references('?size=100'))).includes('guarded'));
  });
});
