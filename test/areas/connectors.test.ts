import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { connectorProfilePartName } from '../../src/areas/connectors/profiles.ts';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { selfSignedCertificate, startLoopbackApi, type LoopbackApi } from '../helpers/loopback.ts';
import { oauthConnectionBody } from '../helpers/oauth.ts';

const ENDPOINT_FIELDS = [
  'auth',
  'authTemplate',
  'authenticationOptions',
  'body',
  'headerParameters',
  'httpMethod',
  'id',
  'name',
  'paging',
  'queryParameters',
  'structure',
  'uriParameters',
  'url',
];

describeEachStore('connector profiles', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let developer: string;
  let api: LoopbackApi;
  let secure: LoopbackApi;
  let certificate: ReturnType<typeof selfSignedCertificate>;

  before(async () => {
    certificate = selfSignedCertificate();
    api = await startLoopbackApi((request, response) => {
      if (request.url.startsWith('/redirect-private'))
        return void response.writeHead(302, { location: 'http://10.0.0.1/' }).end();
      response.writeHead(200, { 'content-type': 'application/json', 'x-api': 'loopback' }).end('{"ok":true}');
    });
    secure = await startLoopbackApi(undefined, certificate);
    // The external APIs of these tests are on 127.0.0.1, so this server is told to allow it.
    server = await TestServer.start(kind, { outboundAllowedRanges: ['127.0.0.1/32'], outboundCaFile: certificate.certFile });
    ({ caller, viewer, developer } = await server.prologue({ project: false }));
  });
  after(async () => {
    await server.close();
    await api.close();
    await secure.close();
    certificate.remove();
  });

  const endpoint = (fields: Record<string, unknown> = {}) => ({
    name: 'Items',
    url: `${api.url}/items/{itemId}`,
    httpMethod: 'GET',
    auth: 'NONE',
    uriParameters: [{ name: 'itemId', value: '1' }],
    ...fields,
  });
  const create = (endpoints: unknown[], token = caller.token, name = 'Loopback API') =>
    server.api('POST', '/custom-connectors', { token, body: { name, endpoints } });
  async function connectorWith(fields: Record<string, unknown>): Promise<{ id: string; endpointId: string }> {
    const answer = await create([endpoint(fields)]);
    assert.equal(answer.status, 201, answer.text);
    return { id: answer.body.id, endpointId: answer.body.endpoints[0].id };
  }
  const runTest = (connector: { id: string; endpointId: string }, body: unknown = {}, token = caller.token) =>
    server.api('POST', `/custom-connectors/${connector.id}/endpoints/${connector.endpointId}/test`, { token, body });

  test('GET /flex-connectors answers the shipped catalogue as a bare array of complete profiles', async () => {
    const answer = await server.api('GET', '/flex-connectors', { token: viewer });
    assert.equal(answer.status, 200);
    assert.ok(Array.isArray(answer.body) && answer.body.length >= 5);
    const ids = answer.body.map((p: { alternateId: string }) => p.alternateId);
    for (const id of ['github', 'jira-cloud', 'stripe', 'openweathermap', 'nasa-apod', 'newsapi'])
      assert.ok(ids.includes(id), id);
    for (const profile of answer.body) {
      assert.deepEqual(Object.keys(profile).sort(), [
        'alternateId',
        'deleted',
        'deletedTime',
        'endpoints',
        'icon',
        'lastModified',
        'logo',
        'name',
      ]);
      assert.equal(profile.deleted, false);
      assert.equal(profile.deletedTime, null);
      assert.equal(profile.logo.type, 'URL');
      for (const e of profile.endpoints) assert.deepEqual(Object.keys(e).sort(), ENDPOINT_FIELDS);
    }
    const parts = answer.body.map(connectorProfilePartName);
    assert.equal(new Set(parts).size, parts.length);
    assert.ok(parts.includes('connector-profile:flex-github.json'));
  });

  test('custom connectors: created with ids and defaults, read, listed, and what the list answers can be sent back as it is', async () => {
    const created = await create([endpoint()]);
    assert.equal(created.status, 201);
    const profile = created.body;
    assert.match(profile.id, /^[0-9a-f-]{36}$/);
    assert.deepEqual(Object.keys(profile.endpoints[0]).sort(), ENDPOINT_FIELDS);
    assert.equal(profile.endpoints[0].authTemplate, null);
    assert.deepEqual(profile.endpoints[0].paging, { type: 'NONE' });
    assert.equal(profile.endpoints[0].body, null);
    assert.equal(profile.deleted, false);
    assert.equal(profile.deletedTime, null);
    assert.ok(!Number.isNaN(Date.parse(profile.lastModified)));
    assert.deepEqual((await server.api('GET', `/custom-connectors/${profile.id}`, { token: caller.token })).body, profile);

    const listed = (await server.api('GET', '/custom-connectors', { token: caller.token })).body.find(
      (p: { id: string }) => p.id === profile.id,
    );
    assert.deepEqual(listed, profile);
    assert.equal(connectorProfilePartName(listed), `connector-profile:custom-${profile.id}.json`);
    const sentBack = await server.api('PUT', `/custom-connectors/${profile.id}`, { token: caller.token, body: listed });
    assert.equal(sentBack.status, 200, sentBack.text);
    assert.deepEqual(sentBack.body.endpoints, profile.endpoints, 'endpoint ids and every field survive the round trip');
    assert.ok(sentBack.body.lastModified >= profile.lastModified);

    const renamed = await server.api('PUT', `/custom-connectors/${profile.id}`, {
      token: caller.token,
      body: { ...listed, name: 'Renamed', endpoints: [] },
    });
    assert.equal(renamed.body.name, 'Renamed');
    assert.deepEqual(renamed.body.endpoints, []);
  });

  test('a profile is validated: 400 with a violation naming each field', async () => {
    const schema = expectProblem(await create([{ ...endpoint(), httpMethod: 'FETCH', name: '' }]), 400, 'bad-request');
    const fields = schema.violations!.map((v) => v.split(':')[0]);
    assert.ok(
      fields.includes('body.endpoints.0.httpMethod') && fields.includes('body.endpoints.0.name'),
      schema.violations!.join('\n'),
    );

    const missingOAuth = '11111111-2222-4333-8444-555555555555';
    const problem = expectProblem(
      await create([
        endpoint({ auth: 'BEARER' }),
        endpoint({
          auth: 'BASIC',
          authenticationOptions: [
            { type: 'BASIC', parameters: [{ name: 'username', value: 'a' }, { name: 'password' }], additionalParameters: null },
          ],
        }),
        endpoint({
          auth: 'BEARER',
          authenticationOptions: [
            { type: 'BEARER', parameters: [{ name: 'token', value: 'plain-token' }], additionalParameters: null },
          ],
        }),
        endpoint({
          auth: 'OAUTH',
          authenticationOptions: [
            { type: 'OAUTH', parameters: [{ name: 'a', oauthConnectionId: missingOAuth }], additionalParameters: null },
          ],
        }),
        endpoint({ url: `${api.url}/{missing}`, uriParameters: [] }),
        { ...endpoint(), id: 'same' },
        { ...endpoint(), id: 'same' },
      ]),
      400,
      'bad-request',
    );
    for (const violation of [
      'body.endpoints.0.auth: the endpoint has no BEARER authentication option',
      'body.endpoints.1.url: must be https: Basic credentials are sent only over HTTPS',
      'body.endpoints.2.authenticationOptions.0.parameters.0.value: is not allowed in a BEARER option',
      `body.endpoints.3.authenticationOptions.0.parameters.0.oauthConnectionId: OAuth connection ${missingOAuth} does not exist`,
      'body.endpoints.4.url: {missing} has no URI parameter of that name',
      'body.endpoints.6.id: "same" is the id of another endpoint of the profile',
    ]) {
      assert.ok(problem.violations!.includes(violation), `${violation}\nnot in\n${problem.violations!.join('\n')}`);
    }
  });

  test('an API key name is unique within the endpoint (400)', async () => {
    const keys = [
      { name: 'key', addTo: 'QUERY_PARAMETER' },
      { name: 'key', addTo: 'HEADER_PARAMETER' },
    ];
    const problem = expectProblem(
      await create([
        endpoint({ auth: 'API_KEY', authenticationOptions: [{ type: 'API_KEY', parameters: keys, additionalParameters: null }] }),
      ]),
      400,
    );
    assert.deepEqual(problem.violations, [
      'body.endpoints.0.authenticationOptions.0.parameters.1.name: "key" is used by another parameter of the option',
    ]);
  });

  test('delete marks the profile deleted; the list hides it unless asked; it can no longer be changed or tested', async () => {
    const connector = await connectorWith({});
    assert.equal((await server.api('DELETE', `/custom-connectors/${connector.id}`, { token: caller.token })).status, 204);
    const visible = (await server.api('GET', '/custom-connectors', { token: caller.token })).body;
    assert.ok(!visible.some((p: { id: string }) => p.id === connector.id));
    const all = (await server.api('GET', '/custom-connectors?includeDeleted=true', { token: caller.token })).body;
    const deleted = all.find((p: { id: string }) => p.id === connector.id);
    assert.equal(deleted.deleted, true);
    assert.ok(!Number.isNaN(Date.parse(deleted.deletedTime)));
    assert.equal((await server.api('GET', `/custom-connectors/${connector.id}`, { token: caller.token })).body.deleted, true);
    expectProblem(
      await server.api('PUT', `/custom-connectors/${connector.id}`, { token: caller.token, body: { name: 'x', endpoints: [] } }),
      404,
    );
    expectProblem(await server.api('DELETE', `/custom-connectors/${connector.id}`, { token: caller.token }), 404);
    expectProblem(await runTest(connector), 404);
  });

  test("another account's profiles and OAuth connections answer 404 and cannot be used", async () => {
    const connector = await connectorWith({});
    const oauth = (await server.api('POST', '/oauth-connections', { token: caller.token, body: oauthConnectionBody('isolated') }))
      .body;
    const stranger = await server.newAccount('stranger');
    assert.deepEqual((await server.api('GET', '/custom-connectors?includeDeleted=true', { token: stranger.token })).body, []);
    expectProblem(await server.api('GET', `/custom-connectors/${connector.id}`, { token: stranger.token }), 404);
    expectProblem(
      await server.api('PUT', `/custom-connectors/${connector.id}`, {
        token: stranger.token,
        body: { name: 'x', endpoints: [] },
      }),
      404,
    );
    expectProblem(await server.api('DELETE', `/custom-connectors/${connector.id}`, { token: stranger.token }), 404);
    expectProblem(await runTest(connector, {}, stranger.token), 404);
    const borrowing = endpoint({
      auth: 'OAUTH',
      authenticationOptions: [
        { type: 'OAUTH', parameters: [{ name: 'a', oauthConnectionId: oauth.id }], additionalParameters: null },
      ],
    });
    expectProblem(await create([borrowing], stranger.token), 400);
    assert.equal((await create([borrowing])).status, 201);
  });

  test('roles: viewers read; developers write and test', async () => {
    const connector = await connectorWith({});
    assert.equal((await server.api('GET', '/custom-connectors', { token: viewer })).status, 200);
    assert.equal((await server.api('GET', `/custom-connectors/${connector.id}`, { token: viewer })).status, 200);
    expectProblem(await create([endpoint()], viewer), 403, 'forbidden');
    expectProblem(
      await server.api('PUT', `/custom-connectors/${connector.id}`, { token: viewer, body: { name: 'x', endpoints: [] } }),
      403,
    );
    expectProblem(await server.api('DELETE', `/custom-connectors/${connector.id}`, { token: viewer }), 403);
    expectProblem(await runTest(connector, {}, viewer), 403);
    assert.equal((await create([endpoint()], developer)).status, 201);
    assert.equal((await runTest(connector, {}, developer)).status, 200);
  });

  test('a test sends the described request with its parameters and answers what the API answered', async () => {
    const connector = await connectorWith({
      httpMethod: 'POST',
      body: '{"q":1}',
      queryParameters: [{ name: 'limit', value: '10' }, { name: 'unset' }],
      headerParameters: [{ name: 'X-Trace', value: 'default' }],
    });
    const answer = await runTest(connector, {
      uriParameters: { itemId: 'a b/c' },
      queryParameters: { extra: '1' },
      headerParameters: { 'X-Trace': 't-1' },
    });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body.status, 200);
    assert.equal(answer.body.body, '{"ok":true}');
    assert.equal(answer.body.headers['x-api'], 'loopback');
    assert.equal(answer.body.truncated, false);
    const seen = api.received.at(-1)!;
    assert.equal(seen.method, 'POST');
    assert.equal(seen.url, '/items/a%20b%2Fc?limit=10&extra=1');
    assert.equal(seen.headers['x-trace'], 't-1');
    assert.equal(seen.headers['content-type'], 'application/json');
    assert.equal(seen.body, '{"q":1}');
  });

  test('Bearer: the token is sent as Authorization: Bearer, and only there', async () => {
    const connector = await connectorWith({
      auth: 'BEARER',
      authenticationOptions: [
        {
          type: 'BEARER',
          parameters: [{ name: 'token', secret: { secretName: 'api', secretKey: 'token' } }],
          additionalParameters: null,
        },
      ],
    });
    const missing = expectProblem(await runTest(connector), 400);
    assert.deepEqual(missing.violations, ['body.credentials.token: is required']);
    const answer = await runTest(connector, { credentials: { token: 'bearer-secret-1' } });
    assert.equal(answer.body.status, 200);
    assert.equal(api.received.at(-1)!.headers.authorization, 'Bearer bearer-secret-1');
    assert.ok(!answer.text.includes('bearer-secret-1'), 'the credential is not answered');
    await assertNotStored('bearer-secret-1');
  });

  test("the specification's spellings: paging type none (answered as written) and options with no parameters yet", async () => {
    const connector = await connectorWith({
      auth: 'BEARER',
      paging: { type: 'none' },
      authenticationOptions: [
        { type: 'BEARER', parameters: [], additionalParameters: null },
        { type: 'API_KEY', parameters: [], additionalParameters: null },
        { type: 'OAUTH', parameters: [], additionalParameters: null },
      ],
    });
    const stored = await server.api('GET', `/custom-connectors/${connector.id}`, { token: caller.token });
    assert.deepEqual(stored.body.endpoints[0].paging, { type: 'none' });
    assert.deepEqual(
      stored.body.endpoints[0].authenticationOptions.map((o: { parameters: unknown[] }) => o.parameters),
      [[], [], []],
    );
    // The credential is bound at test time: a Bearer token from the test request, nothing to bind for a key or OAuth.
    const answer = await runTest(connector, { credentials: { token: 'bound-at-test' } });
    assert.equal(answer.body.status, 200, answer.text);
    assert.equal(api.received.at(-1)!.headers.authorization, 'Bearer bound-at-test');
    expectProblem(await runTest(connector, { authType: 'API_KEY' }), 422);
    expectProblem(await runTest(connector, { authType: 'OAUTH' }), 422);
    const half = expectProblem(
      await create([
        endpoint({ authenticationOptions: [{ type: 'BEARER', parameters: [{ name: 'bearer' }], additionalParameters: null }] }),
      ]),
      400,
    );
    assert.match(half.violations!.join(), /exactly the parameters token, or none/);
  });

  test('a profile holds no credential: credential-shaped values are refused, naming the field, never echoed', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ headerParameters: [{ name: 'Authorization', value: 'Bearer s3cr3t-A' }] }, 'body.endpoints.0.headerParameters.0.value'],
      [{ queryParameters: [{ name: 'api_key', value: 's3cr3t-B' }] }, 'body.endpoints.0.queryParameters.0.value'],
      [{ url: 'https://user:s3cr3t-C@api.example.com/x', uriParameters: [] }, 'body.endpoints.0.url'],
      [
        {
          auth: 'BEARER',
          authenticationOptions: [{ type: 'BEARER', parameters: [], additionalParameters: { password: 's3cr3t-D' } }],
        },
        'body.endpoints.0.authenticationOptions.0.additionalParameters.password',
      ],
      [{ httpMethod: 'POST', body: '{"user": "me", "password": "s3cr3t-E"}' }, 'body.endpoints.0.body'],
      // What an outside attack stored (issue 36): credential header and query names, a custom header valued
      // Bearer, credential parameters in the endpoint URL.
      [{ headerParameters: [{ name: 'X-Auth-Token', value: 's3cr3t-F' }] }, 'body.endpoints.0.headerParameters.0.value'],
      [
        {
          headerParameters: [
            { name: 'Accept', value: 'application/json' },
            { name: 'Ocp-Apim-Subscription-Key', value: 's3cr3t-G' },
          ],
        },
        'body.endpoints.0.headerParameters.1.value',
      ],
      [{ headerParameters: [{ name: 'X-Custom', value: 'Bearer s3cr3t-H-0123' }] }, 'body.endpoints.0.headerParameters.0.value'],
      [{ queryParameters: [{ name: 'key', value: 's3cr3t-I' }] }, 'body.endpoints.0.queryParameters.0.value'],
      [{ queryParameters: [{ name: 'sig', value: 's3cr3t-J' }] }, 'body.endpoints.0.queryParameters.0.value'],
      [{ queryParameters: [{ name: 'appid', value: 's3cr3t-K' }] }, 'body.endpoints.0.queryParameters.0.value'],
      [{ url: 'https://api.example.com/x?api_key=s3cr3t-L', uriParameters: [] }, 'body.endpoints.0.url'],
      [{ url: 'https://api.example.com/x?token=s3cr3t-M', uriParameters: [] }, 'body.endpoints.0.url'],
      [{ url: 'https://api.example.com/x?p%61ssword=s3cr3t-N', uriParameters: [] }, 'body.endpoints.0.url'],
    ];
    for (const [fields, field] of cases) {
      const answer = await create([endpoint(fields)]);
      const problem = expectProblem(answer, 400);
      assert.ok(
        problem.violations!.some((v) => v.startsWith(`${field}: a profile holds no credential`)),
        JSON.stringify(problem.violations),
      );
      assert.ok(!answer.text.includes('s3cr3t'), 'not echoed');
    }
    assert.ok(!(await server.api('GET', '/custom-connectors', { token: viewer })).text.includes('s3cr3t'), 'not stored');
    // Declaring such a parameter without a value, and bodies with look-alike names, are fine.
    const fine = await create([
      endpoint({
        httpMethod: 'POST',
        headerParameters: [{ name: 'Authorization' }],
        body: '{"pageToken": "abc", "tokenCount": 3}',
        url: `${api.url}/issues/{key}`,
        uriParameters: [{ name: 'key', value: 'PROJ-1' }],
      }),
    ]);
    assert.equal(fine.status, 201, fine.text);
  });

  test('URI parameters that make the URL invalid or are not valid text: 400 naming the parameter', async () => {
    const host = await connectorWith({ url: 'http://{h}/x', uriParameters: [{ name: 'h', value: '127.0.0.1' }] });
    const invalid = expectProblem(await runTest(host, { uriParameters: { h: '127.0.0.1:1' } }), 400);
    assert.deepEqual(invalid.violations, ['body.uriParameters.h: makes the endpoint URL invalid']);
    const surrogate = expectProblem(await runTest(await connectorWith({}), { uriParameters: { itemId: '\ud800' } }), 400);
    assert.deepEqual(surrogate.violations, ['body.uriParameters.itemId: is not valid Unicode text']);
  });

  test('API key: added as a query parameter or a header, as the profile says', async () => {
    const connector = await connectorWith({
      auth: 'API_KEY',
      authenticationOptions: [
        {
          type: 'API_KEY',
          parameters: [
            { name: 'appid', addTo: 'QUERY_PARAMETER', secret: { secretName: 'weather' } },
            { name: 'X-Api-Key', addTo: 'HEADER_PARAMETER' },
          ],
          additionalParameters: null,
        },
      ],
    });
    const answer = await runTest(connector, { credentials: { appid: 'query-secret-2', 'X-Api-Key': 'header-secret-3' } });
    assert.equal(answer.body.status, 200, answer.text);
    const seen = api.received.at(-1)!;
    assert.equal(new URL(seen.url, api.url).searchParams.get('appid'), 'query-secret-2');
    assert.equal(seen.headers['x-api-key'], 'header-secret-3');
    assert.ok(!answer.text.includes('secret-2') && !answer.text.includes('secret-3'));
    await assertNotStored('query-secret-2');
    await assertNotStored('header-secret-3');
  });

  test('Basic: username and password as Authorization: Basic over HTTPS (a certificate the deployment trusts)', async () => {
    const connector = await connectorWith({
      url: `${secure.url}/basic`,
      uriParameters: [],
      auth: 'BASIC',
      authenticationOptions: [
        {
          type: 'BASIC',
          parameters: [
            { name: 'username', value: 'alice' },
            { name: 'password', secret: { secretName: 'api-login' } },
          ],
          additionalParameters: null,
        },
      ],
    });
    const answer = await runTest(connector, { credentials: { password: 'basic-secret-4' } });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.status, 200);
    assert.equal(
      secure.received.at(-1)!.headers.authorization,
      `Basic ${Buffer.from('alice:basic-secret-4').toString('base64')}`,
    );
    await assertNotStored('basic-secret-4');
  });

  test('OAuth: a variable selects one of several connections; one pending setup can be saved but not tested with', async () => {
    const connect = async (name: string, authorized: boolean) =>
      (await server.api('POST', '/oauth-connections', { token: caller.token, body: oauthConnectionBody(name, authorized) })).body
        .id as string;
    const production = await connect('oauth production', true);
    const sandbox = await connect('oauth sandbox', false);
    const connector = await connectorWith({
      auth: 'OAUTH',
      authenticationOptions: [
        {
          type: 'OAUTH',
          parameters: [
            { name: 'production', oauthConnectionId: production },
            { name: 'sandbox', oauthConnectionId: sandbox },
          ],
          additionalParameters: { variable: 'environment' },
        },
      ],
    });
    const unselected = expectProblem(await runTest(connector, { credentials: { accessToken: 'x' } }), 400);
    assert.deepEqual(unselected.violations, ['body.variables.environment: must be one of production, sandbox']);

    const answer = await runTest(connector, {
      variables: { environment: 'production' },
      credentials: { accessToken: 'oauth-secret-5' },
    });
    assert.equal(answer.body.status, 200, answer.text);
    assert.equal(api.received.at(-1)!.headers.authorization, 'Bearer oauth-secret-5');

    const before = api.received.length;
    const pending = expectProblem(
      await runTest(connector, { variables: { environment: 'sandbox' }, credentials: { accessToken: 'x' } }),
      409,
      'oauth-pending-setup',
    );
    assert.match(pending.detail, /pending setup/);
    assert.equal(api.received.length, before, 'nothing was sent');

    await server.api('POST', `/oauth-connections/${sandbox}/setup`, {
      token: caller.token,
      body: { tokens: { secretName: 'sandbox-tokens' } },
    });
    assert.equal(
      (await runTest(connector, { variables: { environment: 'sandbox' }, credentials: { accessToken: 'y' } })).body.status,
      200,
    );
    await assertNotStored('oauth-secret-5');
  });

  test('outbound rules hold through the API: redirects to private addresses refused, unreachable APIs answered 502', async () => {
    const redirecting = await connectorWith({ url: `${api.url}/redirect-private`, uriParameters: [] });
    const problem = expectProblem(await runTest(redirecting), 422, 'destination-not-allowed');
    assert.match(problem.detail, /10\.0\.0\.1/);
    const closed = await connectorWith({ url: 'http://127.0.0.1:1/', uriParameters: [] });
    expectProblem(await runTest(closed), 502, 'bad-gateway');
  });

  test('by default, loopback and private destinations are refused and nothing is sent', async () => {
    const strict = await TestServer.start(kind);
    try {
      const owner = await strict.newAccount();
      const before = api.received.length;
      for (const url of [
        `${api.url}/items`,
        `http://localhost:${api.port}/items`,
        'http://192.168.1.20/items',
        'http://169.254.169.254/latest',
      ]) {
        const created = await strict.api('POST', '/custom-connectors', {
          token: owner.token,
          body: { name: 'x', endpoints: [{ name: 'e', url, httpMethod: 'GET', auth: 'NONE' }] },
        });
        const answer = await strict.api(
          'POST',
          `/custom-connectors/${created.body.id}/endpoints/${created.body.endpoints[0].id}/test`,
          { token: owner.token, body: {} },
        );
        expectProblem(answer, 422, 'destination-not-allowed');
      }
      assert.equal(api.received.length, before);
    } finally {
      await strict.close();
    }
  });

  /** No row of the store holds the credential: neither the profiles nor the audit trail. */
  async function assertNotStored(secret: string) {
    const profiles = await server.db.selectFrom('customConnectors').select('document').execute();
    const events = await server.db.selectFrom('auditEvents').select(['resourceIds', 'path']).execute();
    const stored = JSON.stringify([profiles, events]);
    assert.ok(!stored.includes(secret), `${secret} is stored`);
  }
});
