import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('201 answers carry the Location of what they made', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
  });
  after(() => server.close());

  /** POSTs `body` to `path` and answers the Location header, checking the 201. */
  async function locationOf(path: string, body: unknown): Promise<string> {
    const answer = await server.api('POST', path, { token: caller.token, body });
    assert.equal(answer.status, 201, answer.text);
    const location = answer.headers.get('location');
    assert.ok(location, `${path}: no Location`);
    return location;
  }
  const follow = (location: string, method = 'GET', body?: unknown) =>
    server.request(method, location, { token: caller.token, body });

  test('projects, custom connectors and OAuth connections: the Location reads the resource back', async () => {
    const project = await locationOf('/projects', { name: 'located' });
    const read = await follow(project);
    assert.equal(read.status, 200);
    assert.equal(project, `/dpc/v1/projects/${read.body.id}`);

    const connector = await locationOf('/custom-connectors', {
      name: 'Located API',
      endpoints: [{ name: 'e', url: 'https://api.example.com/x', httpMethod: 'GET', auth: 'NONE' }],
    });
    assert.equal((await follow(connector)).body.name, 'Located API');

    const oauth = await locationOf('/oauth-connections', {
      name: 'located oauth',
      grantType: 'CLIENT_CREDENTIALS',
      clientId: 'id',
      clientSecret: { secretName: 'oauth', secretKey: 'secret' },
      tokenUrl: 'https://auth.example.com/token',
    });
    assert.equal((await follow(oauth)).body.name, 'located oauth');
  });

  test('project resources: the Location is where they are changed and deleted (names encoded)', async () => {
    const projectId = await server.newProject(caller);
    const environment = await locationOf(`/projects/${projectId}/environments`, { name: 'Test (EU) 1' });
    assert.equal(environment, `/dpc/v1/projects/${projectId}/environments/Test%20(EU)%201`);

    const variable = await locationOf(`/projects/${projectId}/variables`, {
      name: 'rows$',
      type: 'NUMBER',
      behaviour: 'SHARED',
      value: 1,
    });
    assert.equal(variable, `/dpc/v1/projects/${projectId}/variables/rows%24`);
    assert.equal((await follow(variable, 'PATCH', { type: 'NUMBER', behaviour: 'COPIED' })).status, 200);

    const connection = await locationOf(`/projects/${projectId}/connections`, {
      name: 'warehouse db',
      authType: 'GENERIC_SECRET',
      platformConnectionType: 'COMPONENT_BASIC',
    });
    assert.equal(connection, `/dpc/v1/projects/${projectId}/connections?connectionName=warehouse+db`);
    assert.equal((await follow(connection, 'DELETE')).status, 204);
    assert.equal((await follow(environment, 'DELETE')).status, 204);
  });
});
