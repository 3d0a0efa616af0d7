import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

/**
 * SDKs and scripts send one header set on every call: `Content-Type: application/json` (SCIM clients
 * `application/scim+json`) on a DELETE or a bodiless POST too, with an empty body. An empty body is no body.
 */
describeEachStore('empty bodies with a JSON content type', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let directoryToken: string;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
    const created = await server.api('POST', '/directory-integration/tokens', { token: caller.token, body: { name: 'idp' } });
    directoryToken = created.body.token;
  });
  after(() => server.close());

  /** As such a client sends it: its content type, an empty body (Content-Length: 0), its accept header. */
  const bare = (method: string, apiPath: string, contentType = 'application/json', token = caller.token) =>
    server.api(method, apiPath, {
      token,
      body: '',
      headers: { 'content-type': contentType, accept: 'application/json' },
    });

  test('DELETE of a project, a variable and an override takes the empty body as none', async () => {
    const projectId = await server.newProject(caller);
    const created = await server.api('POST', `/projects/${projectId}/variables`, {
      token: caller.token,
      body: { name: 'region', type: 'TEXT', behaviour: 'SHARED', value: 'eu' },
    });
    assert.equal(created.status, 201, created.text);
    const variable = await bare('DELETE', `/projects/${projectId}/variables/region`);
    assert.equal(variable.status, 204, variable.text);
    const project = await bare('DELETE', `/projects/${projectId}`);
    assert.ok(project.status === 204 || project.status === 202, `${project.status} ${project.text}`);
    assert.equal((await server.api('GET', `/projects/${projectId}`, { token: caller.token })).status, 404);
  });

  test('a bodiless POST (start of a streaming pipeline) takes the empty body as none', async () => {
    const projectId = await server.newProject(caller);
    const agent = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'runner', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'eks' },
    });
    const pipeline = await server.api('POST', `/projects/${projectId}/streaming-pipelines`, {
      token: caller.token,
      body: {
        name: 'cdc',
        agentId: agent.body.agentId,
        streamingSource: {
          type: 'postgres',
          connection: {
            host: 'db',
            port: 5432,
            database: 'orders',
            username: 'u',
            password: { secretType: 'aws_secrets_manager', secretName: 'db', key: 'password' },
          },
          tables: [{ schema: 'public', table: 'orders' }],
        },
        streamingTarget: { type: 's3', bucket: 'lake', prefix: '' },
      },
    });
    assert.equal(pipeline.status, 201, pipeline.text);
    const started = await bare('POST', `/projects/${projectId}/streaming-pipelines/${pipeline.body.streamingPipelineId}/start`);
    assert.equal(started.status, 202, started.text);
    assert.equal(started.body.status, 'STARTING');
  });

  test('where a body is required, an empty one answers 400 saying the body is missing', async () => {
    for (const contentType of ['application/json', 'application/json; charset=utf-8']) {
      const problem = expectProblem(await bare('POST', '/projects', contentType), 400);
      assert.match(problem.detail, /body is missing/);
      assert.deepEqual(problem.violations, ['body: is required']);
    }
    // White space only is empty too; no body and no content type says the same.
    const spaces = await server.api('POST', '/projects', {
      token: caller.token,
      body: '  \n',
      headers: { 'content-type': 'application/json' },
    });
    assert.match(expectProblem(spaces, 400).detail, /body is missing/);
    assert.match(expectProblem(await server.api('POST', '/projects', { token: caller.token }), 400).detail, /body is missing/);
    // A body that is there but not JSON is still malformed, not missing.
    const broken = await server.api('POST', '/projects', {
      token: caller.token,
      body: '{',
      headers: { 'content-type': 'application/json' },
    });
    assert.doesNotMatch(expectProblem(broken, 400).detail, /missing/);
  });

  test('SCIM: DELETE with application/scim+json and an empty body; a POST without its body is invalidSyntax', async () => {
    const scim = '/directory-integration/scim/v2';
    const user = await server.api('POST', `${scim}/Users`, {
      token: directoryToken,
      body: JSON.stringify({ schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName: 'ada@example.com' }),
      headers: { 'content-type': 'application/scim+json', accept: 'application/scim+json' },
    });
    assert.equal(user.status, 201, user.text);
    const removed = await server.api('DELETE', `${scim}/Users/${user.body.id}`, {
      token: directoryToken,
      body: '',
      headers: { 'content-type': 'application/scim+json', accept: 'application/scim+json' },
    });
    assert.equal(removed.status, 204, removed.text);
    const missing = await server.api('POST', `${scim}/Users`, {
      token: directoryToken,
      body: '',
      headers: { 'content-type': 'application/scim+json', accept: 'application/scim+json' },
    });
    assert.equal(missing.status, 400, missing.text);
    assert.equal(missing.body.scimType, 'invalidSyntax');
    assert.match(missing.body.detail, /body is missing/);
  });
});
