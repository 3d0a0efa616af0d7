import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { freePort, spawnAgent } from '../helpers/processes.ts';
import { until } from '../helpers/until.ts';

const definition = (agentId: string, port: number, name = 'orders-cdc') => ({
  name,
  agentId,
  streamingSource: {
    type: 'POSTGRES',
    connection: {
      host: '127.0.0.1',
      port,
      username: 'replicator',
      password: { secretName: 'orders-db', secretType: 'PASSWORD', secretKey: 'password' },
    },
    tables: [{ schema: 'public', table: 'orders' }],
  },
  streamingTarget: {
    type: 'AZURE_BLOB',
    accountName: 'lake',
    accountKey: { secretName: 'lake', secretType: 'PASSWORD' },
    container: 'cdc',
  },
});

describeEachStore('streaming pipelines', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let agentId: string;
  let source: Server;
  let sourcePort: number;
  let stateDir: string;
  let agent: ReturnType<typeof spawnAgent>;

  before(async () => {
    server = await TestServer.start(kind, { agentConnectedSeconds: 3, agentPollWaitSeconds: 1 });
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'streamer', agentType: 'HYBRID', cloudProvider: 'azure', deployment: 'aks' },
    });
    agentId = created.body.agentId;
    const credentials = (await server.api('POST', `/agents/${agentId}/credentials`, { token: caller.token })).body;
    source = createServer((socket) => socket.end()).listen(0, '127.0.0.1');
    await new Promise((resolve) => source.once('listening', resolve));
    sourcePort = (source.address() as { port: number }).port;
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    agent = spawnAgent(server.url, credentials, stateDir);
    // The agent's first start makes its RSA key, which takes a while on a loaded machine.
    await until(
      'the agent to connect',
      async () => (await server.api('GET', `/agents/${agentId}`, { token: caller.token })).body.connected,
      60_000,
    );
  });
  after(async () => {
    await agent.stop();
    source.close();
    await server.close();
    rmSync(stateDir, { recursive: true, force: true });
  });

  const at = (suffix = '') => `/projects/${projectId}/streaming-pipelines${suffix}`;

  test('create, read, list, replace and delete; credentials only as secret references; the agent must be the account’s', async () => {
    assert.deepEqual((await server.api('GET', at(), { token: caller.token })).body, { page: 0, results: [], size: 25, total: 0 });
    const created = await server.api('POST', at(), { token: caller.token, body: definition(agentId, sourcePort, 'crud') });
    assert.equal(created.status, 201, created.text);
    const id = created.body.streamingPipelineId;
    assert.equal(created.body.status, 'STOPPED');
    assert.equal(created.headers.get('location'), `/dpc/v1${at(`/${id}`)}`);
    assert.deepEqual((await server.api('GET', at(`/${id}`), { token: caller.token })).body, created.body);
    expectProblem(await server.api('POST', at(), { token: caller.token, body: definition(agentId, sourcePort, 'crud') }), 409);

    const plainPassword = definition(agentId, sourcePort, 'plain');
    (plainPassword.streamingSource.connection as Record<string, unknown>).password = 'hunter2';
    expectProblem(await server.api('POST', at(), { token: caller.token, body: plainPassword }), 400);
    const inProperties = definition(agentId, sourcePort, 'props');
    (inProperties.streamingSource.connection as Record<string, unknown>).jdbcProperties = { ssl: 'true', password: 'hunter2' };
    const refused = await server.api('POST', at(), { token: caller.token, body: inProperties });
    expectProblem(refused, 400);
    assert.match(refused.body.violations.join(), /jdbcProperties\.password/);
    assert.ok(!refused.text.includes('hunter2'));
    const stranger = await server.newAccount('stranger');
    const foreignAgent = definition(agentId, sourcePort, 'foreign');
    const strangersProject = await server.newProject(stranger);
    const wrongAgent = await server.api('POST', `/projects/${strangersProject}/streaming-pipelines`, {
      token: stranger.token,
      body: foreignAgent,
    });
    expectProblem(wrongAgent, 400);
    assert.match(wrongAgent.body.violations[0], /^agentId/);
    expectProblem(await server.api('GET', at(`/${id}`), { token: stranger.token }), 404);

    const replaced = await server.api('PUT', at(`/${id}`), {
      token: caller.token,
      body: { ...definition(agentId, sourcePort, 'crud-2'), advancedProperties: { batchSize: '100' } },
    });
    assert.equal(replaced.status, 200, replaced.text);
    assert.equal(replaced.body.name, 'crud-2');
    assert.deepEqual(replaced.body.advancedProperties, { batchSize: '100' });
    const listed = await server.api('GET', at('?size=1'), { token: caller.token });
    assert.equal(listed.body.total, 1);
    assert.equal((await server.api('DELETE', at(`/${id}`), { token: caller.token })).status, 204);
    expectProblem(await server.api('GET', at(`/${id}`), { token: caller.token }), 404);
  });

  test('started, the agent runs it (RUNNING); stopped, it stops; an unreachable source fails with a message', async () => {
    const id = (await server.api('POST', at(), { token: caller.token, body: definition(agentId, sourcePort, 'runs') })).body
      .streamingPipelineId;
    const started = await server.api('POST', at(`/${id}/start`), { token: caller.token });
    assert.equal(started.status, 202, started.text);
    assert.equal(started.body.status, 'STARTING');
    expectProblem(await server.api('POST', at(`/${id}/start`), { token: caller.token }), 409);
    await until(
      'RUNNING',
      async () => (await server.api('GET', at(`/${id}/status`), { token: caller.token })).body.status === 'RUNNING',
    );
    expectProblem(await server.api('DELETE', at(`/${id}`), { token: caller.token }), 409);
    expectProblem(await server.api('DELETE', `/agents/${agentId}`, { token: caller.token }), 409);
    const stopping = await server.api('POST', at(`/${id}/stop`), { token: caller.token });
    assert.equal(stopping.body.status, 'STOPPING');
    await until(
      'STOPPED',
      async () => (await server.api('GET', at(`/${id}/status`), { token: caller.token })).body.status === 'STOPPED',
    );
    expectProblem(await server.api('POST', at(`/${id}/stop`), { token: caller.token }), 409);

    const closedPort = await freePort();
    const failing = (
      await server.api('POST', at(), { token: caller.token, body: definition(agentId, closedPort, 'unreachable') })
    ).body.streamingPipelineId;
    await server.api('POST', at(`/${failing}/start`), { token: caller.token });
    const failed = await until('FAILED', async () => {
      const status = (await server.api('GET', at(`/${failing}/status`), { token: caller.token })).body;
      return status.status === 'FAILED' && status;
    });
    assert.match(failed.statusMessage, new RegExp(`127\\.0\\.0\\.1:${closedPort} cannot be reached`));
  });
});
