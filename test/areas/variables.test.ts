import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('project variables and environment overrides', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, projectId } = await server.prologue({ environments: ['production', 'test'] }));
  });
  after(() => server.close());

  const as = (token: string) => ({
    get: (path: string) => server.api('GET', path, { token }),
    post: (path: string, body: unknown) => server.api('POST', path, { token, body }),
    patch: (path: string, body: unknown) => server.api('PATCH', path, { token, body }),
    delete: (path: string) => server.api('DELETE', path, { token }),
  });
  const api = () => as(caller.token);
  const variables = (project = projectId) => `/projects/${project}/variables`;
  const overrides = (name: string, project = projectId) => `${variables(project)}/${name}/environment-overrides`;

  async function environment(project: string, name: string) {
    const answer = await api().post(`/projects/${project}/environments`, { name });
    assert.equal(answer.status, 201, answer.text);
  }
  async function variable(body: Record<string, unknown>, project = projectId) {
    const answer = await api().post(variables(project), { type: 'TEXT', behaviour: 'SHARED', ...body });
    assert.equal(answer.status, 201, answer.text);
    return answer.body;
  }

  test('E4 creates a variable (201) and E3 lists it; a duplicate name is 409', async () => {
    const created = await variable({
      name: 'region',
      description: 'Cloud region',
      value: 'eu-west-1',
      supportsDoubleResolution: true,
    });
    assert.match(created.id, /^[0-9a-f-]{36}$/);
    assert.deepEqual(
      { ...created, id: undefined },
      {
        id: undefined,
        name: 'region',
        type: 'TEXT',
        behaviour: 'SHARED',
        description: 'Cloud region',
        value: 'eu-west-1',
        supportsDoubleResolution: true,
      },
    );
    const numeric = await variable({ name: 'retries', type: 'NUMBER', behaviour: 'COPIED', value: 3 });
    assert.equal(numeric.value, 3);
    assert.equal(numeric.supportsDoubleResolution, false);
    expectProblem(await api().post(variables(), { name: 'region', type: 'TEXT', behaviour: 'SHARED' }), 409, 'conflict');
    const page = await api().get(variables());
    assert.equal(page.status, 200);
    assert.equal(page.body.page, 0);
    assert.equal(page.body.size, 25);
    assert.ok(page.body.results.some((v: { name: string }) => v.name === 'region'));
  });

  test('E3 pages by name with an exact total, which follows creates and deletes', async () => {
    const project = await server.newProject(caller);
    for (const name of ['c', 'a', 'b', 'e', 'd']) await variable({ name }, project);
    const first = await api().get(`${variables(project)}?page=0&size=2`);
    assert.deepEqual(
      first.body.results.map((v: { name: string }) => v.name),
      ['a', 'b'],
    );
    assert.equal(first.body.total, 5);
    const last = await api().get(`${variables(project)}?page=2&size=2`);
    assert.deepEqual(
      last.body.results.map((v: { name: string }) => v.name),
      ['e'],
    );
    assert.equal((await api().delete(`${variables(project)}/c`)).status, 204);
    expectProblem(await api().delete(`${variables(project)}/c`), 404);
    const after = await api().get(variables(project));
    assert.equal(after.body.total, 4);
    assert.deepEqual(
      after.body.results.map((v: { name: string }) => v.name),
      ['a', 'b', 'd', 'e'],
    );
    const empty = await api().get(variables(await server.newProject(caller)));
    assert.deepEqual(empty.body, { page: 0, results: [], size: 25, total: 0 });
    const bad = expectProblem(await api().get(`${variables(project)}?page=-1&size=101`), 400);
    assert.deepEqual(bad.violations?.sort(), ['page: must be >= 0', 'size: must be <= 100']);
  });

  test('variableName: 1 to 255 characters of the pattern, not $ alone, not a digit first', async () => {
    for (const name of ['x', '$x', '_', 'a$1', 'v'.repeat(255)]) await variable({ name });
    assert.equal((await api().patch(`${variables()}/${'v'.repeat(255)}`, { type: 'TEXT', behaviour: 'SHARED' })).status, 200);
    for (const name of ['', '$', '1abc', 'a-b', 'a b', 'é', 'v'.repeat(256)]) {
      const problem = expectProblem(await api().post(variables(), { name, type: 'TEXT', behaviour: 'SHARED' }), 400);
      assert.ok(
        problem.violations?.every((v) => v.startsWith('body.name: ')),
        problem.violations?.join(),
      );
    }
    for (const name of ['$', '1abc', 'v'.repeat(256)]) {
      const path = `${variables()}/${encodeURIComponent(name)}`;
      for (const answer of [
        await api().patch(path, { type: 'TEXT', behaviour: 'SHARED' }),
        await api().delete(path),
        await api().get(`${path}/environment-overrides`),
      ]) {
        const problem = expectProblem(answer, 400);
        assert.ok(
          problem.violations?.every((v) => v.startsWith('variableName: ')),
          problem.violations?.join(),
        );
      }
    }
  });

  test('names every object answers to (constructor, toString, __proto__) are refused: 400 naming the field (issue 36)', async () => {
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'prototype']) {
      const problem = expectProblem(await api().post(variables(), { name, type: 'TEXT', behaviour: 'SHARED' }), 400);
      assert.deepEqual(
        problem.violations?.map((v) => v.split(':')[0]),
        ['body.name'],
        problem.violations?.join(),
      );
      assert.match(problem.violations![0], /reserve/);
      const path = `${variables()}/${name}`;
      const refused = expectProblem(await api().patch(path, { type: 'TEXT', behaviour: 'SHARED' }), 400);
      assert.ok(
        refused.violations?.every((v) => v.startsWith('variableName: ')),
        refused.violations?.join(),
      );
    }
    // Names that only contain them are ordinary names.
    for (const name of ['constructor_name', 'my_toString']) await variable({ name });
  });

  test('a value must fit the type: 422 naming body.value; wrong JSON types are 400', async () => {
    const text = expectProblem(
      await api().post(variables(), { name: 'n1', type: 'TEXT', behaviour: 'SHARED', value: 5 }),
      422,
      'unprocessable-entity',
    );
    assert.deepEqual(text.violations, ['body.value: must be a string for a TEXT variable']);
    const number = expectProblem(
      await api().post(variables(), { name: 'n1', type: 'NUMBER', behaviour: 'SHARED', value: 'five' }),
      422,
    );
    assert.deepEqual(number.violations, ['body.value: must be a number for a NUMBER variable']);
    const invalid = expectProblem(
      await api().post(variables(), { name: 'n1', type: 'DATE', behaviour: 'ALWAYS', value: true }),
      400,
    );
    assert.ok(invalid.violations?.some((v) => v.startsWith('body.type')));
    assert.ok(invalid.violations?.some((v) => v.startsWith('body.behaviour')));
    assert.ok(invalid.violations?.some((v) => v.startsWith('body.value')));
    const missing = expectProblem(await api().post(variables(), {}), 400);
    assert.deepEqual(missing.violations?.sort(), [
      'body.behaviour: is required',
      'body.name: is required',
      'body.type: is required',
    ]);
    assert.equal((await api().get(`${variables()}/n1/environment-overrides`)).status, 404, 'nothing was written');
  });

  test('E5 is partial, needs type and behaviour, keeps the name', async () => {
    await variable({ name: 'patched', description: 'before', value: 'a' });
    const missing = expectProblem(await api().patch(`${variables()}/patched`, { description: 'x' }), 400);
    assert.deepEqual(missing.violations?.sort(), ['body.behaviour: is required', 'body.type: is required']);
    const answer = await api().patch(`${variables()}/patched`, {
      type: 'TEXT',
      behaviour: 'COPIED',
      supportsDoubleResolution: true,
    });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.name, 'patched');
    assert.equal(answer.body.behaviour, 'COPIED');
    assert.equal(answer.body.description, 'before');
    assert.equal(answer.body.value, 'a');
    assert.equal(answer.body.supportsDoubleResolution, true);
    const renamed = await api().patch(`${variables()}/patched`, { name: 'other', type: 'TEXT', behaviour: 'COPIED', value: 'b' });
    assert.equal(renamed.body.name, 'patched', 'the name is immutable');
    const full = await api().get(overrides('patched'));
    assert.equal(full.body.value, 'b');
    assert.equal(full.body.behaviour, 'COPIED');
    expectProblem(await api().patch(`${variables()}/nosuch`, { type: 'TEXT', behaviour: 'SHARED' }), 404);
  });

  test('E5 refuses a type change that leaves the value or an override misfitting (422), and changes nothing', async () => {
    await variable({ name: 'typed', value: 'abc' });
    await api().post(overrides('typed'), [
      { environmentName: 'production', value: 'x' },
      { environmentName: 'test', value: 'y' },
    ]);
    const refused = expectProblem(
      await api().patch(`${variables()}/typed`, { type: 'NUMBER', behaviour: 'SHARED', value: 1 }),
      422,
    );
    assert.deepEqual(refused.violations, [
      'environmentName: the override of "production" must be a number for a NUMBER variable',
      'environmentName: the override of "test" must be a number for a NUMBER variable',
    ]);
    const keptValue = expectProblem(await api().patch(`${variables()}/typed`, { type: 'NUMBER', behaviour: 'SHARED' }), 422);
    assert.ok(keptValue.violations?.[0].startsWith('body.value: the current value must be a number'));
    const unchanged = await api().get(overrides('typed'));
    assert.equal(unchanged.body.type, 'TEXT');
    assert.equal(unchanged.body.value, 'abc');
    // Once the overrides fit, the change goes through.
    await api().post(overrides('typed'), [{ environmentName: 'production', value: 'x' }]);
    assert.equal((await api().delete(`${overrides('typed')}/production`)).status, 204);
    assert.equal((await api().delete(`${overrides('typed')}/test`)).status, 204);
    const changed = await api().patch(`${variables()}/typed`, { type: 'NUMBER', behaviour: 'SHARED', value: 7 });
    assert.equal(changed.status, 200, changed.text);
    assert.equal(changed.body.value, 7);
    const written = await api().post(overrides('typed'), [{ environmentName: 'test', value: 8.5 }]);
    assert.deepEqual(written.body, { overrides: [{ environmentName: 'test', value: 8.5 }], failedOverride: [] });
  });

  test('E8 creates or updates each override; the others are answered in failedOverride with the reason', async () => {
    await variable({ name: 'endpoint', value: 'dev.example' });
    const first = await api().post(overrides('endpoint'), [
      { environmentName: 'production', value: 'prod.example' },
      { environmentName: 'nowhere', value: 'x' },
      { environmentName: 'test', value: 42 },
    ]);
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(first.body, {
      overrides: [{ environmentName: 'production', value: 'prod.example' }],
      failedOverride: [
        { environmentName: 'nowhere', reason: 'The environment does not exist in this project.' },
        { environmentName: 'test', reason: 'The value must be a string for a TEXT variable.' },
      ],
    });
    const second = await api().post(overrides('endpoint'), [
      { environmentName: 'production', value: 'prod2.example' },
      { environmentName: 'test', value: 'test.example' },
    ]);
    assert.deepEqual(second.body.failedOverride, []);
    const full = await api().get(overrides('endpoint'));
    assert.equal(full.status, 200);
    assert.equal(full.body.name, 'endpoint');
    assert.equal(full.body.value, 'dev.example');
    assert.deepEqual(full.body.overrides, [
      { environmentName: 'production', value: 'prod2.example' },
      { environmentName: 'test', value: 'test.example' },
    ]);
    const one = await api().get(`${overrides('endpoint')}?environmentName=test`);
    assert.deepEqual(one.body, { environmentName: 'test', value: 'test.example' });
  });

  test('E8 request errors: malformed items, repeats, unknown variable', async () => {
    await variable({ name: 'strict' });
    expectProblem(await api().post(overrides('strict'), []), 400);
    expectProblem(await api().post(overrides('strict'), { environmentName: 'test', value: 'x' }), 400);
    const pattern = expectProblem(
      await api().post(overrides('strict'), [
        { environmentName: '-test', value: 'x' },
        { environmentName: 'a', value: null },
      ]),
      400,
    );
    assert.ok(pattern.violations?.some((v) => v.startsWith('body.0.environmentName')));
    assert.ok(pattern.violations?.some((v) => v.startsWith('body.1.value')));
    const repeated = expectProblem(
      await api().post(overrides('strict'), [
        { environmentName: 'test', value: 'x' },
        { environmentName: 'test', value: 'y' },
      ]),
      400,
    );
    assert.deepEqual(repeated.violations, ['body.1.environmentName: "test" is listed more than once']);
    expectProblem(await api().post(overrides('nosuch'), [{ environmentName: 'test', value: 'x' }]), 404);
    assert.deepEqual((await api().get(overrides('strict'))).body.overrides, [], 'nothing was written');
  });

  test('environmentName bounds: 1 to 255 of the pattern, no leading or trailing dash', async () => {
    await variable({ name: 'bounds' });
    const project = await server.newProject(caller);
    await variable({ name: 'bounds' }, project);
    const good = ['a', 'My env (2)', 'pre-prod', 'e'.repeat(255)];
    for (const name of good) await environment(project, name);
    const longest = `${overrides('bounds', project)}/${'e'.repeat(255)}`;
    expectProblem(await api().delete(longest), 404);
    const written = await api().post(
      overrides('bounds', project),
      good.map((environmentName) => ({ environmentName, value: 'v' })),
    );
    assert.equal(written.body.overrides.length, 4, written.text);
    for (const name of ['', '-a', 'a-', 'a/b', 'e'.repeat(256)]) {
      const problem = expectProblem(await api().post(overrides('bounds', project), [{ environmentName: name, value: 'v' }]), 400);
      assert.ok(
        problem.violations?.every((v) => v.startsWith('body.0.environmentName: ')),
        problem.violations?.join(),
      );
    }
    for (const name of ['-a', 'a-', 'e'.repeat(256)]) {
      const problem = expectProblem(await api().delete(`${overrides('bounds', project)}/${encodeURIComponent(name)}`), 400);
      assert.ok(
        problem.violations?.every((v) => v.startsWith('environmentName: ')),
        problem.violations?.join(),
      );
      expectProblem(await api().get(`${overrides('bounds', project)}?environmentName=${encodeURIComponent(name)}`), 400);
    }
  });

  test('E7 with an environment that has no override, and E9 failures: 404', async () => {
    await variable({ name: 'lonely' });
    expectProblem(await api().get(`${overrides('lonely')}?environmentName=test`), 404);
    expectProblem(await api().get(`${overrides('lonely')}?environmentName=nowhere`), 404);
    expectProblem(await api().delete(`${overrides('lonely')}/test`), 404);
    expectProblem(await api().delete(`${overrides('lonely')}/nowhere`), 404);
    expectProblem(await api().delete(`${overrides('nosuch')}/test`), 404);
    await api().post(overrides('lonely'), [{ environmentName: 'test', value: 'v' }]);
    assert.equal((await api().delete(`${overrides('lonely')}/test`)).status, 204);
    expectProblem(await api().get(`${overrides('lonely')}?environmentName=test`), 404);
  });

  test('cascades: a variable takes its overrides, an environment its overrides, a project everything', async () => {
    const project = await server.newProject(caller);
    for (const name of ['dev', 'prod']) await environment(project, name);
    await variable({ name: 'v1' }, project);
    await variable({ name: 'v2' }, project);
    for (const name of ['v1', 'v2']) {
      await api().post(overrides(name, project), [
        { environmentName: 'dev', value: 'd' },
        { environmentName: 'prod', value: 'p' },
      ]);
    }
    const overrideCount = async () =>
      Number(
        (
          await server.db
            .selectFrom('variableOverrides')
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    const before = await overrideCount();
    assert.equal((await api().delete(`${variables(project)}/v1`)).status, 204);
    assert.equal(await overrideCount(), before - 2);
    assert.equal((await api().delete(`/projects/${project}/environments/dev`)).status, 204);
    assert.deepEqual((await api().get(overrides('v2', project))).body.overrides, [{ environmentName: 'prod', value: 'p' }]);
    // Recreating the variable starts without the old overrides.
    await variable({ name: 'v1' }, project);
    assert.deepEqual((await api().get(overrides('v1', project))).body.overrides, []);
    assert.equal((await api().delete(`/projects/${project}`)).status, 204);
    assert.equal(await overrideCount(), before - 4);
    const left = await server.db.selectFrom('projectVariables').select('id').where('projectId', '=', project).execute();
    assert.deepEqual(left, []);
    const counter = await server.db
      .selectFrom('projectVariableCounts')
      .select('total')
      .where('projectId', '=', project)
      .execute();
    assert.deepEqual(counter, []);
  });

  test('roles: a viewer reads and gets 403 on every write', async () => {
    await variable({ name: 'guarded' });
    assert.equal((await as(viewer).get(variables())).status, 200);
    assert.equal((await as(viewer).get(overrides('guarded'))).status, 200);
    expectProblem(await as(viewer).post(variables(), { name: 'x', type: 'TEXT', behaviour: 'SHARED' }), 403, 'forbidden');
    expectProblem(await as(viewer).patch(`${variables()}/guarded`, { type: 'TEXT', behaviour: 'SHARED' }), 403);
    expectProblem(await as(viewer).delete(`${variables()}/guarded`), 403);
    expectProblem(await as(viewer).post(overrides('guarded'), [{ environmentName: 'test', value: 'v' }]), 403);
    expectProblem(await as(viewer).delete(`${overrides('guarded')}/test`), 403);
    const developer = await server.tokenFor(caller.accountId, 'developer');
    assert.equal((await as(developer).post(overrides('guarded'), [{ environmentName: 'test', value: 'v' }])).status, 200);
  });

  test("another account's project answers 404 on every operation", async () => {
    await variable({ name: 'mine' });
    await api().post(overrides('mine'), [{ environmentName: 'test', value: 'v' }]);
    const other = as((await server.newAccount('other')).token);
    const answers = [
      await other.get(variables()),
      await other.post(variables(), { name: 'x', type: 'TEXT', behaviour: 'SHARED' }),
      await other.patch(`${variables()}/mine`, { type: 'TEXT', behaviour: 'SHARED' }),
      await other.delete(`${variables()}/mine`),
      await other.get(overrides('mine')),
      await other.post(overrides('mine'), [{ environmentName: 'test', value: 'v' }]),
      await other.delete(`${overrides('mine')}/test`),
    ];
    for (const answer of answers) expectProblem(answer, 404, 'not-found');
    assert.equal((await api().get(`${overrides('mine')}?environmentName=test`)).body.value, 'v');
  });

  test('writes are audited with the variable name', async () => {
    await variable({ name: 'audited' });
    const events = await api().get(`/events?projectId=${projectId}`);
    assert.ok(events.body.results.some((e: { resourceIds: Record<string, string> }) => e.resourceIds.variableName === 'audited'));
  });
});
