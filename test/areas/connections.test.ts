import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

const basic = (name: string, details: Record<string, unknown> = { connectionProperties: { secretName: 'warehouse' } }) => ({
  name,
  authType: 'GENERIC_SECRET',
  platformConnectionType: 'COMPONENT_BASIC',
  connectionDetails: details,
});

describeEachStore('project connections and their environment overrides', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, projectId } = await server.prologue({ environments: ['production', 'test'] }));
  });
  after(() => server.close());

  const call = (method: string, path: string, body?: unknown, token = caller.token) => server.api(method, path, { token, body });
  const connections = (query = '', project = projectId) => `/projects/${project}/connections${query}`;
  const overrides = (query = '', project = projectId) => `/projects/${project}/connections/environment-overrides${query}`;
  async function create(body: Record<string, unknown>, project = projectId) {
    const answer = await call('POST', connections('', project), body);
    assert.equal(answer.status, 201, answer.text);
    return answer.body;
  }

  test('create answers 201 with ProjectConnection; a duplicate name is 409', async () => {
    const created = await create({
      ...basic('warehouse', {
        connectionProperties: { secretName: 'warehouse', secretKey: 'password' },
        description: 'Warehouse login',
        secretsLocation: { type: 'AWS_SECRET_MANAGER', region: 'eu-west-1' },
      }),
    });
    assert.equal(created.name, 'warehouse');
    assert.equal(created.projectId, projectId);
    assert.equal(created.authProvider, 'NONE');
    assert.equal(created.createdBy, caller.clientId);
    assert.ok(!Number.isNaN(Date.parse(created.createdDate)));
    assert.deepEqual(created.connectionDetails, {
      connectionProperties: { secretName: 'warehouse', secretKey: 'password' },
      description: 'Warehouse login',
      secretsLocation: { type: 'AWS_SECRET_MANAGER', region: 'eu-west-1' },
    });
    expectProblem(await call('POST', connections(), basic('warehouse')), 409, 'conflict');
  });

  test('an empty connection (no details, no vault) is allowed', async () => {
    const empty = await create({ name: 'empty', authType: 'OAUTH_USER_TOKENS', platformConnectionType: 'COMPONENT_BASIC' });
    assert.equal(empty.connectionDetails, undefined);
  });

  test('each vault type takes its own field and no other (422 otherwise)', async () => {
    const locations = [
      { type: 'AWS_SECRET_MANAGER', region: 'eu-west-1' },
      { type: 'AZURE_SECRET_MANAGER', vaultName: 'kv' },
      { type: 'GCP_SECRET_MANAGER', gcpProjectId: 'my-project' },
      { type: 'MATILLION_CUSTOMER_VAULT' },
      { type: 'DEFAULT_SECRET_VAULT' },
    ];
    for (const [i, secretsLocation] of locations.entries()) {
      const answer = await create(basic(`vault${i}`, { connectionProperties: { secretName: 's' }, secretsLocation }));
      assert.deepEqual(answer.connectionDetails.secretsLocation, secretsLocation);
    }
    const missing = expectProblem(
      await call('POST', connections(), basic('v', { secretsLocation: { type: 'AZURE_SECRET_MANAGER' } })),
      422,
    );
    assert.deepEqual(missing.violations, [
      'body.connectionDetails.secretsLocation.vaultName: is required for AZURE_SECRET_MANAGER',
    ]);
    const extra = expectProblem(
      await call('POST', connections(), basic('v', { secretsLocation: { type: 'DEFAULT_SECRET_VAULT', region: 'x' } })),
      422,
    );
    assert.deepEqual(extra.violations, [
      'body.connectionDetails.secretsLocation.region: is not allowed for DEFAULT_SECRET_VAULT',
    ]);
    const wrong = expectProblem(
      await call(
        'POST',
        connections(),
        basic('v', { secretsLocation: { type: 'GCP_SECRET_MANAGER', gcpProjectId: 'p', vaultName: 'kv' } }),
      ),
      422,
    );
    assert.deepEqual(wrong.violations, [
      'body.connectionDetails.secretsLocation.vaultName: is not allowed for GCP_SECRET_MANAGER',
    ]);
    expectProblem(await call('POST', connections(), basic('v', { secretsLocation: { type: 'VAULT_X' } })), 400);
  });

  test('connectionProperties take the shape of the connection type; authType must go with it (422)', async () => {
    const cloud = await create({
      name: 'cloud',
      authType: 'CLOUD_PROVIDER_SECRET',
      platformConnectionType: 'CLOUD_PLATFORM_CREDENTIALS',
      authProvider: 'aws',
      connectionDetails: { connectionProperties: { credentialSecretName: 'aws-creds' } },
    });
    assert.equal(cloud.authProvider, 'aws');
    const noSecret = expectProblem(
      await call('POST', connections(), basic('p', { connectionProperties: { secretKey: 'k' } })),
      422,
      'unprocessable-entity',
    );
    assert.deepEqual(noSecret.violations, [
      'body.connectionDetails.connectionProperties.secretName: is required for COMPONENT_BASIC',
    ]);
    const crossed = expectProblem(
      await call('POST', connections(), {
        name: 'p',
        authType: 'CLOUD_PROVIDER_SECRET',
        platformConnectionType: 'CLOUD_PLATFORM_CREDENTIALS',
        connectionDetails: { connectionProperties: { secretName: 's', secretKey: 'k' } },
      }),
      422,
    );
    assert.deepEqual(crossed.violations, [
      'body.connectionDetails.connectionProperties.secretName: is not allowed for CLOUD_PLATFORM_CREDENTIALS',
      'body.connectionDetails.connectionProperties.secretKey: is not allowed for CLOUD_PLATFORM_CREDENTIALS',
    ]);
    const pair = expectProblem(await call('POST', connections(), { ...basic('p'), authType: 'CLOUD_PROVIDER_SECRET' }), 422);
    assert.deepEqual(pair.violations, ['body.authType: CLOUD_PROVIDER_SECRET does not go with COMPONENT_BASIC']);
    const pair2 = expectProblem(
      await call('POST', connections(), {
        name: 'p',
        authType: 'GENERIC_SECRET',
        platformConnectionType: 'CLOUD_PLATFORM_CREDENTIALS',
      }),
      422,
    );
    assert.deepEqual(pair2.violations, ['body.authType: GENERIC_SECRET does not go with CLOUD_PLATFORM_CREDENTIALS']);
    assert.equal((await call('GET', connections('?connectionNames=p'))).body.total, 0, 'nothing was written');
  });

  test('malformed bodies are 400 with violations', async () => {
    const enums = expectProblem(
      await call('POST', connections(), { name: 'x', authType: 'PASSWORD', platformConnectionType: 'OTHER' }),
      400,
      'bad-request',
    );
    assert.ok(enums.violations?.some((v) => v.startsWith('body.authType')));
    assert.ok(enums.violations?.some((v) => v.startsWith('body.platformConnectionType')));
    const emptySecret = expectProblem(
      await call('POST', connections(), basic('x', { connectionProperties: { secretName: '' } })),
      400,
    );
    assert.deepEqual(emptySecret.violations, [
      'body.connectionDetails.connectionProperties.secretName: must NOT have fewer than 1 characters',
    ]);
    const types = expectProblem(await call('POST', connections(), { ...basic('x'), connectionDetails: { description: 5 } }), 400);
    assert.deepEqual(types.violations, ['body.connectionDetails.description: must be string']);
    for (const name of ['', 'n'.repeat(256)]) expectProblem(await call('POST', connections(), basic(name)), 400);
    await create(basic('n'.repeat(255)));
    await create(basic('1'));
    const json = await server.api('POST', connections(), {
      token: caller.token,
      body: '{"name":',
      headers: { 'content-type': 'application/json' },
    });
    expectProblem(json, 400);
    expectProblem(await call('PUT', connections()), 400);
  });

  test('E1 replaces the connection whole: what is left out is unset', async () => {
    await create({
      ...basic('replaced', {
        connectionProperties: { secretName: 'one', secretKey: 'k' },
        description: 'first',
        secretsLocation: { type: 'DEFAULT_SECRET_VAULT' },
      }),
      authProvider: 'my-connector',
    });
    const replaced = await call('PUT', connections('?connectionName=replaced'), {
      authType: 'OAUTH_CLIENT_CRED',
      platformConnectionType: 'COMPONENT_BASIC',
      connectionDetails: { connectionProperties: { secretName: 'two' } },
    });
    assert.equal(replaced.status, 200, replaced.text);
    assert.equal(replaced.body.authType, 'OAUTH_CLIENT_CRED');
    assert.equal(replaced.body.authProvider, 'NONE');
    assert.equal(replaced.body.createdBy, caller.clientId);
    assert.deepEqual(replaced.body.connectionDetails, { connectionProperties: { secretName: 'two' } });
    const emptied = await call('PUT', connections('?connectionName=replaced'), {
      authType: 'GENERIC_SECRET',
      platformConnectionType: 'COMPONENT_BASIC',
    });
    assert.equal(emptied.body.connectionDetails, undefined);
    const listed = await call('GET', connections('?connectionNames=replaced'));
    assert.equal(listed.body.results[0].connectionDetails, undefined);
    expectProblem(
      await call('PUT', connections('?connectionName=nosuch'), {
        authType: 'GENERIC_SECRET',
        platformConnectionType: 'COMPONENT_BASIC',
      }),
      404,
    );
    const missing = expectProblem(
      await call('PUT', connections(), { authType: 'GENERIC_SECRET', platformConnectionType: 'COMPONENT_BASIC' }),
      400,
    );
    assert.deepEqual(missing.violations, ['connectionName: is required']);
    const bad = expectProblem(
      await call('PUT', connections('?connectionName=replaced'), {
        authType: 'CLOUD_PROVIDER_SECRET',
        platformConnectionType: 'COMPONENT_BASIC',
      }),
      422,
    );
    assert.equal(bad.violations?.length, 1);
    assert.equal(
      (await call('GET', connections('?connectionNames=replaced'))).body.results[0].authType,
      'GENERIC_SECRET',
      'unchanged',
    );
  });

  test('list: paged by name, filters authProvider and connectionNames', async () => {
    const project = await server.newProject(caller);
    await create(basic('c'), project);
    await create({ ...basic('a'), authProvider: 'salesforce' }, project);
    await create(basic('b'), project);
    const page = await call('GET', connections('?size=2', project));
    assert.deepEqual(
      page.body.results.map((c: { name: string }) => c.name),
      ['a', 'b'],
    );
    assert.equal(page.body.total, 3);
    const byProvider = await call('GET', connections('?authProvider=salesforce', project));
    assert.deepEqual(
      byProvider.body.results.map((c: { name: string }) => c.name),
      ['a'],
    );
    const byNames = await call('GET', connections('?connectionNames=c,%20a,nosuch', project));
    assert.deepEqual(
      byNames.body.results.map((c: { name: string }) => c.name),
      ['a', 'c'],
    );
    assert.equal(byNames.body.total, 2);
    expectProblem(await call('GET', connections('?connectionNames=,', project)), 400);
  });

  test('E2 deletes a connection (204) with its overrides; unknown is 404', async () => {
    await create(basic('doomed'));
    assert.equal(
      (
        await call('POST', overrides(), {
          connectionName: 'doomed',
          environmentName: 'test',
          connectionDetails: { connectionProperties: { secretName: 't' } },
        })
      ).status,
      201,
    );
    assert.equal((await call('DELETE', connections('?connectionName=doomed'))).status, 204);
    expectProblem(await call('DELETE', connections('?connectionName=doomed')), 404);
    expectProblem(await call('DELETE', connections()), 400);
    assert.equal((await call('GET', overrides('?connectionNames=doomed'))).body.total, 0);
    const rows = await server.db
      .selectFrom('connectionOverrides')
      .innerJoin('connections', 'connections.id', 'connectionOverrides.connectionId')
      .select('connections.name')
      .where('connections.name', '=', 'doomed')
      .execute();
    assert.deepEqual(rows, []);
  });

  test('environment overrides: create, list, replace, delete, and their failures', async () => {
    await create(basic('shifting'));
    const body = {
      connectionName: 'shifting',
      environmentName: 'production',
      connectionDetails: { connectionProperties: { secretName: 'prod' }, secretsLocation: { type: 'DEFAULT_SECRET_VAULT' } },
    };
    const created = await call('POST', overrides(), body);
    assert.equal(created.status, 201, created.text);
    assert.deepEqual(created.body, body);
    expectProblem(await call('POST', overrides(), body), 409);
    expectProblem(await call('POST', overrides(), { ...body, environmentName: 'nowhere' }), 404);
    expectProblem(await call('POST', overrides(), { ...body, connectionName: 'nosuch' }), 404);
    const misfit = expectProblem(
      await call('POST', overrides(), {
        ...body,
        environmentName: 'test',
        connectionDetails: { connectionProperties: { credentialSecretName: 'x' } },
      }),
      422,
    );
    assert.deepEqual(misfit.violations, [
      'body.connectionDetails.connectionProperties.credentialSecretName: is not allowed for COMPONENT_BASIC',
      'body.connectionDetails.connectionProperties.secretName: is required for COMPONENT_BASIC',
    ]);
    for (const environmentName of ['-prod', 'prod-', ''])
      expectProblem(await call('POST', overrides(), { ...body, environmentName }), 400);
    await call('POST', overrides(), { ...body, environmentName: 'test' });
    const listed = await call('GET', overrides('?connectionNames=shifting'));
    assert.deepEqual(
      listed.body.results.map((o: { environmentName: string }) => o.environmentName),
      ['production', 'test'],
    );
    const one = await call('GET', overrides('?connectionNames=shifting&environmentName=test'));
    assert.equal(one.body.total, 1);
    const key = '?connectionName=shifting&environmentName=production';
    const replaced = await call('PUT', overrides(key), { connectionDetails: { connectionProperties: { secretName: 'prod2' } } });
    assert.equal(replaced.status, 200, replaced.text);
    assert.deepEqual(
      replaced.body.connectionDetails,
      { connectionProperties: { secretName: 'prod2' } },
      'secretsLocation is unset',
    );
    expectProblem(
      await call('PUT', overrides('?connectionName=other&environmentName=production'), { connectionDetails: {} }),
      404,
    );
    assert.equal((await call('DELETE', overrides(key))).status, 204);
    expectProblem(await call('DELETE', overrides(key)), 404);
    expectProblem(await call('PUT', overrides(key), { connectionDetails: {} }), 404);
    expectProblem(await call('DELETE', overrides('?connectionName=shifting')), 400);
  });

  test('E1 refuses a type change its overrides would not fit (422), and changes nothing', async () => {
    await create(basic('typed'));
    await call('POST', overrides(), {
      connectionName: 'typed',
      environmentName: 'test',
      connectionDetails: { connectionProperties: { secretName: 't' } },
    });
    const refused = expectProblem(
      await call('PUT', connections('?connectionName=typed'), {
        authType: 'CLOUD_PROVIDER_SECRET',
        platformConnectionType: 'CLOUD_PLATFORM_CREDENTIALS',
      }),
      422,
    );
    assert.deepEqual(refused.violations, ['environmentName: the override of "test" does not fit CLOUD_PLATFORM_CREDENTIALS']);
    assert.equal(
      (await call('GET', connections('?connectionNames=typed'))).body.results[0].platformConnectionType,
      'COMPONENT_BASIC',
    );
  });

  test('deleting an environment or the project removes what hangs off it', async () => {
    const project = await server.newProject(caller);
    await call('POST', `/projects/${project}/environments`, { name: 'gone' });
    await create(basic('kept'), project);
    await call('POST', overrides('', project), {
      connectionName: 'kept',
      environmentName: 'gone',
      connectionDetails: { connectionProperties: { secretName: 'g' } },
    });
    assert.equal((await call('DELETE', `/projects/${project}/environments/gone`)).status, 204);
    assert.equal((await call('GET', overrides('', project))).body.total, 0);
    await call('POST', `/projects/${project}/environments`, { name: 'gone' });
    await call('POST', overrides('', project), {
      connectionName: 'kept',
      environmentName: 'gone',
      connectionDetails: { connectionProperties: { secretName: 'g' } },
    });
    assert.equal((await call('DELETE', `/projects/${project}`)).status, 204);
    const left = await server.db.selectFrom('connections').select('id').where('projectId', '=', project).execute();
    assert.deepEqual(left, []);
  });

  test('only references are stored: fields outside the shape, such as a secret value, are not kept', async () => {
    await create(basic('leaky', { connectionProperties: { secretName: 's', secretValue: 'hunter2' }, password: 'hunter2' }));
    const rows = await server.db.selectFrom('connections').selectAll().where('name', '=', 'leaky').execute();
    assert.ok(!JSON.stringify(rows).includes('hunter2'));
  });

  test('roles: a viewer reads and gets 403 on every write', async () => {
    await create(basic('guarded'));
    assert.equal((await call('GET', connections(), undefined, viewer)).status, 200);
    assert.equal((await call('GET', overrides(), undefined, viewer)).status, 200);
    const writes = [
      await call('POST', connections(), basic('x'), viewer),
      await call(
        'PUT',
        connections('?connectionName=guarded'),
        { authType: 'GENERIC_SECRET', platformConnectionType: 'COMPONENT_BASIC' },
        viewer,
      ),
      await call('DELETE', connections('?connectionName=guarded'), undefined, viewer),
      await call('POST', overrides(), { connectionName: 'guarded', environmentName: 'test', connectionDetails: {} }, viewer),
      await call('PUT', overrides('?connectionName=guarded&environmentName=test'), { connectionDetails: {} }, viewer),
      await call('DELETE', overrides('?connectionName=guarded&environmentName=test'), undefined, viewer),
    ];
    for (const answer of writes) expectProblem(answer, 403, 'forbidden');
  });

  test("another account's project answers 404 on every operation", async () => {
    await create(basic('private'));
    const other = (await server.newAccount('other')).token;
    const answers = [
      await call('GET', connections(), undefined, other),
      await call('POST', connections(), basic('x'), other),
      await call(
        'PUT',
        connections('?connectionName=private'),
        { authType: 'GENERIC_SECRET', platformConnectionType: 'COMPONENT_BASIC' },
        other,
      ),
      await call('DELETE', connections('?connectionName=private'), undefined, other),
      await call('GET', overrides(), undefined, other),
      await call('POST', overrides(), { connectionName: 'private', environmentName: 'test', connectionDetails: {} }, other),
      await call('PUT', overrides('?connectionName=private&environmentName=test'), { connectionDetails: {} }, other),
      await call('DELETE', overrides('?connectionName=private&environmentName=test'), undefined, other),
    ];
    for (const answer of answers) expectProblem(answer, 404, 'not-found');
    expectProblem(await call('GET', connections('', 'not-a-uuid')), 400);
  });
});
