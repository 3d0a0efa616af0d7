import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describeEachStore, expectProblem, TestServer, type Answer, type Caller } from '../helpers/harness.ts';
import { eventually, insertAgent, orchestration, uploadVersion } from '../helpers/executions.ts';
import { oauthConnectionBody } from '../helpers/oauth.ts';
import { writingWithIfMatch } from '../../src/core/conditional.ts';

describeEachStore('conditional requests (ETag, If-None-Match, If-Match)', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
  });
  after(() => server.close());

  /**
   * Runs `mine` (a request with If-Match to `path`) with `theirs` made to land between its check and its write:
   * the check reads the resource through the server (app.inject), then the write runs in a transaction of the
   * store; theirs is done just before that transaction begins. Answers mine's answer, how many times the check
   * read the resource (1: it did not find the resource changing under it and retry) and whether theirs landed.
   */
  async function between<T>(path: string, theirs: () => Promise<unknown>, mine: () => Promise<T>) {
    const app = server.server.app;
    const inject = app.inject;
    const db = app.store.db;
    const transaction = db.transaction;
    let reads = 0;
    let landed = false;
    app.inject = (async (options: { method: string; url: string }) => {
      const answer = await (inject as (o: unknown) => Promise<unknown>).call(app, options);
      if (options.method === 'GET' && options.url.endsWith(path)) reads += 1;
      return answer;
    }) as unknown as typeof app.inject;
    db.transaction = function (this: typeof db) {
      const builder = transaction.call(this);
      if (landed || reads === 0 || !writingWithIfMatch()) return builder;
      landed = true;
      return new Proxy(builder, {
        get: (target, property, receiver) =>
          property === 'execute'
            ? async (work: never) => {
                await theirs();
                return target.execute(work);
              }
            : Reflect.get(target, property, receiver),
      });
    } as typeof db.transaction;
    try {
      const answer = await mine();
      return { answer, reads, landed };
    } finally {
      app.inject = inject;
      db.transaction = transaction;
    }
  }

  test('reads and list pages carry an ETag; If-None-Match answers 304 until the answer changes', async () => {
    const projectId = await server.newProject(caller);
    const read = await server.api('GET', `/projects/${projectId}`, { token: caller.token });
    const tag = read.headers.get('etag')!;
    assert.match(tag, /^"[^"]+"$/);
    const unchanged = await server.api('GET', `/projects/${projectId}`, {
      token: caller.token,
      headers: { 'if-none-match': tag },
    });
    assert.equal(unchanged.status, 304);
    assert.equal(unchanged.text, '');
    assert.equal(unchanged.headers.get('etag'), tag);
    // A list of tags, and a weak form of the tag, match too.
    assert.equal(
      (
        await server.api('GET', `/projects/${projectId}`, {
          token: caller.token,
          headers: { 'if-none-match': `"other", W/${tag}` },
        })
      ).status,
      304,
    );
    const list = await server.api('GET', `/projects/${projectId}/environments`, { token: caller.token });
    const listTag = list.headers.get('etag')!;
    assert.equal(
      (
        await server.api('GET', `/projects/${projectId}/environments`, {
          token: caller.token,
          headers: { 'if-none-match': listTag },
        })
      ).status,
      304,
    );
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
    const changed = await server.api('GET', `/projects/${projectId}/environments`, {
      token: caller.token,
      headers: { 'if-none-match': listTag },
    });
    assert.equal(changed.status, 200);
    assert.notEqual(changed.headers.get('etag'), listTag);
  });

  test('If-Match on PATCH and DELETE: the current version passes, a stale one is 412 and changes nothing', async () => {
    const created = await server.api('POST', '/webhooks', {
      token: caller.token,
      body: { url: 'https://hooks.example.com/a', description: 'v1' },
    });
    const path = `/webhooks/${created.body.webhookId}`;
    const v1 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
    const first = await server.api('PATCH', path, {
      token: caller.token,
      body: { description: 'v2' },
      headers: { 'if-match': v1 },
    });
    assert.equal(first.status, 200);
    // A second writer still holding v1 has lost the race.
    const lost = expectProblem(
      await server.api('PATCH', path, { token: caller.token, body: { description: 'v3' }, headers: { 'if-match': v1 } }),
      412,
    );
    assert.deepEqual(lost.violations, ['If-Match: does not name the current version']);
    assert.equal((await server.api('GET', path, { token: caller.token })).body.description, 'v2');
    const v2 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
    expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': v1 } }), 412);
    expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': `W/${v2}` } }), 412);
    assert.equal((await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': v2 } })).status, 204);
    expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': '*' } }), 412);
  });

  test('If-Match where no GET answers the URL is 400 naming the header, and nothing is done', async () => {
    const projectId = await server.newProject(caller);
    const created = await server.api('POST', `/projects/${projectId}/variables`, {
      token: caller.token,
      body: { name: 'region', type: 'TEXT', behaviour: 'SHARED', value: 'eu' },
    });
    assert.equal(created.status, 201, created.text);
    const path = `/projects/${projectId}/variables/region`;
    assert.equal((await server.api('GET', path, { token: caller.token })).status, 405);
    const refused = expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': '*' } }), 400);
    assert.deepEqual(refused.violations, ['If-Match: not supported on this URL (it has no GET)']);
    // Still there: without the header it goes.
    assert.equal((await server.api('DELETE', path, { token: caller.token })).status, 204);
  });

  /** A webhook (its description `label`) or a schedule (its name `label`) of the caller's; its URL. */
  async function createWebhookOrSchedule(resource: 'webhook' | 'schedule', label: string): Promise<string> {
    if (resource === 'webhook') {
      const created = await server.api('POST', '/webhooks', {
        token: caller.token,
        body: { url: `https://hooks.example.com/${encodeURIComponent(label)}`, description: label },
      });
      assert.equal(created.status, 201, created.text);
      return `/webhooks/${created.body.webhookId}`;
    }
    const projectId = await server.newProject(caller);
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
    const created = await server.api('POST', `/projects/${projectId}/schedules`, {
      token: caller.token,
      body: {
        name: label,
        cronExpression: '0 3 * * *',
        pipelineName: 'pipelines/daily-load.orch.yaml',
        environmentName: 'dev',
        scheduleEnabled: false,
      },
    });
    assert.equal(created.status, 201, created.text);
    return `/projects/${projectId}/schedules/${created.body.scheduleId}`;
  }

  for (const resource of ['webhook', 'schedule'] as const) {
    test(`a write without If-Match that lands between the check and the write (${resource}): the If-Match writer gets 412, no lost update`, async () => {
      const path = await createWebhookOrSchedule(resource, 'v1');
      const field = resource === 'webhook' ? 'description' : 'name';
      const v1 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
      // Another client's write, without If-Match, is made to land after the check passed, before the write.
      const theirs = (value: string) => async () => {
        const answer = await server.api('PATCH', path, { token: caller.token, body: { [field]: value } });
        assert.equal(answer.status, 200, answer.text);
      };
      const mine = await between(path, theirs('theirs'), () =>
        server.api('PATCH', path, { token: caller.token, body: { [field]: 'mine' }, headers: { 'if-match': v1 } }),
      );
      assert.deepEqual([mine.landed, mine.reads], [true, 1]);
      expectProblem(mine.answer, 412);
      assert.equal((await server.api('GET', path, { token: caller.token })).body[field], 'theirs', 'their write stands');
      const v2 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
      const deletion = await between(path, theirs('theirs again'), () =>
        server.api('DELETE', path, { token: caller.token, headers: { 'if-match': v2 } }),
      );
      assert.deepEqual([deletion.landed, deletion.reads], [true, 1]);
      expectProblem(deletion.answer, 412);
      assert.equal((await server.api('GET', path, { token: caller.token })).body[field], 'theirs again', 'not deleted');
    });
  }

  test('a DELETE with If-Match of an agent or a custom connector changed or deleted between the check and the write is 412, not 409 or 404', async () => {
    const unique = () => randomBytes(4).toString('hex');
    const profile = (name: string) => ({
      name,
      endpoints: [{ name: 'e', url: 'https://api.example.com/x', httpMethod: 'GET', auth: 'NONE' }],
    });
    const makers: Record<string, () => Promise<{ path: string; change: { method: string; body?: unknown } }>> = {
      agent: async () => {
        const created = await server.api('POST', '/agents', {
          token: caller.token,
          body: { name: `del ${unique()}`, agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'eks' },
        });
        assert.equal(created.status, 201, created.text);
        return { path: `/agents/${created.body.agentId}`, change: { method: 'PATCH', body: { description: 'theirs' } } };
      },
      'custom connector': async () => {
        const created = await server.api('POST', '/custom-connectors', { token: caller.token, body: profile(`del ${unique()}`) });
        assert.ok(created.status < 300, created.text);
        return { path: `/custom-connectors/${created.body.id}`, change: { method: 'PUT', body: profile(`theirs ${unique()}`) } };
      },
    };
    for (const [resource, make] of Object.entries(makers)) {
      for (const theirs of ['change', 'delete'] as const) {
        const { path, change } = await make();
        const tag = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
        const write = theirs === 'change' ? change : { method: 'DELETE' };
        const mine = await between(
          path,
          async () => {
            const answer = await server.api(write.method, path, { token: caller.token, body: write.body });
            assert.ok(answer.status < 300, answer.text);
          },
          () => server.api('DELETE', path, { token: caller.token, headers: { 'if-match': tag } }),
        );
        assert.deepEqual([mine.landed, mine.reads], [true, 1], `${resource}, theirs: ${theirs}`);
        const problem = expectProblem(mine.answer, 412);
        assert.deepEqual(problem.violations, ['If-Match: does not name the current version'], `${resource}, theirs: ${theirs}`);
      }
    }
  });

  /** A write: its method, the URL it goes to (a GET of it answers the ETag If-Match names) and its body. */
  interface Write {
    method: string;
    body?: unknown;
    /** Where it goes, when not to the resource's URL. */
    path?: string;
  }
  /**
   * A resource of an area whose PUT, PATCH or DELETE changes one row, made new for each test: the URL its writes
   * go to, the write with If-Match (`mine`), another client's write without it (`theirs`), and what the GET
   * shows of each (`shown`; undefined where theirs deletes).
   */
  interface Resource {
    path: string;
    mine: Write;
    theirs: Write;
    shown?: (answer: Answer) => unknown;
  }
  const unique = () => randomBytes(4).toString('hex');
  /** start → end success. */
  const RUN = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["End Success"]
    End Success:
      type: "end-success"
`);
  const pipelineBody = (agentId: string, name: string) => ({
    name,
    agentId,
    streamingSource: {
      type: 'postgres',
      connection: {
        host: 'db.internal',
        port: 5432,
        database: 'orders',
        username: 'replicator',
        password: { secretName: 'orders-db', secretKey: 'password' },
      },
      tables: [{ schema: 'public', table: 'orders' }],
    },
    streamingTarget: {
      type: 'abs',
      accountName: 'lake',
      accountKey: { secretName: 'lake', secretKey: 'key' },
      container: 'cdc',
      prefix: 'orders/',
    },
  });
  const created = (answer: Answer, status = 201) => {
    assert.equal(answer.status, status, answer.text);
    return answer.body;
  };
  // Fixtures shared by the resources: a project with an environment whose default agent never polls (its runs
  // stay QUEUED), a version of it to run, and a streaming agent.
  let projectId: string;
  let streamingAgentId: string;
  const environment = 'dev';
  before(async () => {
    projectId = await server.newProject(caller);
    const idle = await insertAgent(server, caller.accountId);
    created(
      await server.api('POST', `/projects/${projectId}/environments`, {
        token: caller.token,
        body: { name: environment, defaultAgentId: idle },
      }),
    );
    await uploadVersion(server, caller, projectId, environment, 'v1', {
      'pipelines/run.orch.yaml': RUN,
      'pipelines/run.test.orch.yaml': RUN,
    });
    streamingAgentId = created(
      await server.api('POST', '/agents', {
        token: caller.token,
        body: { name: `streaming ${unique()}`, agentType: 'CUSTOMER_HOSTED', cloudProvider: 'azure', deployment: 'aks' },
      }),
    ).agentId;
  });
  const post = async (path: string, body: unknown) => created(await server.api('POST', path, { token: caller.token, body }));
  const byName = (answer: Answer, key: string, name: string) =>
    (answer.body.results as Record<string, any>[]).find((item) => item[key] === name);

  const resources: Record<string, () => Promise<Resource>> = {
    webhook: async () => {
      const { webhookId } = await post('/webhooks', { url: 'https://hooks.example.com/t', description: 'v1' });
      return {
        path: `/webhooks/${webhookId}`,
        mine: { method: 'PATCH', body: { description: 'mine' } },
        theirs: { method: 'PATCH', body: { description: 'theirs' } },
        shown: (answer) => answer.body.description,
      };
    },
    schedule: async () => {
      const { scheduleId } = await post(`/projects/${projectId}/schedules`, {
        name: `s ${unique()}`,
        cronExpression: '0 3 * * *',
        pipelineName: 'pipelines/run.orch.yaml',
        environmentName: environment,
        scheduleEnabled: false,
      });
      const name = unique();
      return {
        path: `/projects/${projectId}/schedules/${scheduleId}`,
        mine: { method: 'PATCH', body: { name: `mine ${name}` } },
        theirs: { method: 'PATCH', body: { name: `theirs ${name}` } },
        shown: (answer) => answer.body.name.split(' ')[0],
      };
    },
    'streaming pipeline': async () => {
      const name = unique();
      const { streamingPipelineId } = await post(
        `/projects/${projectId}/streaming-pipelines`,
        pipelineBody(streamingAgentId, `v1-${name}`),
      );
      return {
        path: `/projects/${projectId}/streaming-pipelines/${streamingPipelineId}`,
        mine: { method: 'PUT', body: pipelineBody(streamingAgentId, `mine-${name}`) },
        theirs: { method: 'PUT', body: pipelineBody(streamingAgentId, `theirs-${name}`) },
        shown: (answer) => answer.body.name.split('-')[0],
      };
    },
    'streaming pipeline (started between)': async () => {
      const { streamingPipelineId } = await post(
        `/projects/${projectId}/streaming-pipelines`,
        pipelineBody(streamingAgentId, `v1-${unique()}`),
      );
      const path = `/projects/${projectId}/streaming-pipelines/${streamingPipelineId}`;
      return {
        path,
        mine: { method: 'DELETE' },
        // A start: the pipeline is STARTING, which a delete refuses (409) but If-Match names first (412).
        theirs: { method: 'POST', path: `${path}/start` },
        shown: (answer) => (answer.status === 404 ? 'mine' : answer.body.status === 'STARTING' ? 'theirs' : answer.body.status),
      };
    },
    project: async () => ({
      path: `/projects/${await server.newProject(caller)}`,
      mine: { method: 'DELETE' },
      theirs: { method: 'DELETE' },
    }),
    agent: async () => {
      const { agentId } = await post('/agents', {
        name: `a ${unique()}`,
        description: 'v1',
        agentType: 'CUSTOMER_HOSTED',
        cloudProvider: 'aws',
        deployment: 'eks',
      });
      return {
        path: `/agents/${agentId}`,
        mine: { method: 'PATCH', body: { description: 'mine' } },
        theirs: { method: 'PATCH', body: { description: 'theirs' } },
        shown: (answer) => answer.body.description,
      };
    },
    'custom connector': async () => {
      const profile = (name: string) => ({
        name,
        endpoints: [{ name: 'e', url: 'https://api.example.com/x', httpMethod: 'GET', auth: 'NONE' }],
      });
      const { id } = await post('/custom-connectors', profile('v1'));
      return {
        path: `/custom-connectors/${id}`,
        mine: { method: 'PUT', body: profile('mine') },
        theirs: { method: 'PUT', body: profile('theirs') },
        shown: (answer) => answer.body.name,
      };
    },
    'OAuth connection': async () => {
      const { id, oauthConnectionId } = await post('/oauth-connections', oauthConnectionBody(`o-${unique()}`));
      return {
        path: `/oauth-connections/${oauthConnectionId ?? id}?confirm=true`,
        mine: { method: 'DELETE' },
        theirs: { method: 'DELETE' },
      };
    },
    'pipeline execution': async () => {
      const { pipelineExecutionId } = await post(`/projects/${projectId}/pipeline-executions`, {
        pipelineName: 'pipelines/run',
        environmentName: environment,
      });
      return {
        path: `/projects/${projectId}/pipeline-executions/${pipelineExecutionId}`,
        mine: { method: 'PATCH', body: { status: 'CANCELLED', forceUpdate: true } },
        theirs: { method: 'PATCH', body: { status: 'CANCELLED' } },
        shown: (answer) => (answer.body.message === 'Cancelled by a user (forced).' ? 'mine' : 'theirs'),
      };
    },
    'test execution': async () => {
      const { testExecutionId } = await post(`/projects/${projectId}/test-executions`, {
        environmentName: environment,
        scope: 'PROJECT',
      });
      return {
        path: `/projects/${projectId}/test-executions/${testExecutionId}`,
        mine: { method: 'PATCH', body: { status: 'CANCELLED', forceUpdate: true } },
        theirs: { method: 'PATCH', body: { status: 'CANCELLED' } },
        shown: (answer) => (answer.body.message === 'Cancelled by a user (forced).' ? 'mine' : 'theirs'),
      };
    },
    connection: async () => {
      const name = `c-${unique()}`;
      const details = (secretName: string) => ({
        authType: 'GENERIC_SECRET',
        platformConnectionType: 'COMPONENT_BASIC',
        connectionDetails: { connectionProperties: { secretName } },
      });
      await post(`/projects/${projectId}/connections`, { name, ...details('v1') });
      return {
        // The GET of this URL is the project's list of connections: what If-Match names is its ETag.
        path: `/projects/${projectId}/connections?connectionName=${name}`,
        mine: { method: 'PUT', body: details('mine') },
        theirs: { method: 'PUT', body: details('theirs') },
        shown: (answer) => byName(answer, 'name', name)?.connectionDetails.connectionProperties.secretName,
      };
    },
    'connection override': async () => {
      const connectionName = `c-${unique()}`;
      const details = (secretName: string) => ({ connectionProperties: { secretName } });
      await post(`/projects/${projectId}/connections`, {
        name: connectionName,
        authType: 'GENERIC_SECRET',
        platformConnectionType: 'COMPONENT_BASIC',
      });
      await post(`/projects/${projectId}/connections/environment-overrides`, {
        connectionName,
        environmentName: environment,
        connectionDetails: details('v1'),
      });
      return {
        path: `/projects/${projectId}/connections/environment-overrides?environmentName=${environment}&connectionName=${connectionName}`,
        mine: { method: 'PUT', body: { connectionDetails: details('mine') } },
        theirs: { method: 'PUT', body: { connectionDetails: details('theirs') } },
        shown: (answer) => byName(answer, 'connectionName', connectionName)?.connectionDetails.connectionProperties.secretName,
      };
    },
    'git repository (hosted: no row yet)': async () => {
      const external = (name: string) => ({ cloneUrl: `https://github.com/acme/${name}.git`, provider: 'github', name });
      return {
        path: `/projects/${await server.newProject(caller)}/git-repository`,
        mine: { method: 'PUT', body: external('mine') },
        theirs: { method: 'PUT', body: external('theirs') },
        shown: (answer) => answer.body.name,
      };
    },
    'git repository (external)': async () => {
      const external = (name: string) => ({ cloneUrl: `https://github.com/acme/${name}.git`, provider: 'github', name });
      const path = `/projects/${await server.newProject(caller)}/git-repository`;
      created(await server.api('PUT', path, { token: caller.token, body: external('v1') }), 200);
      return {
        path,
        mine: { method: 'PUT', body: external('mine') },
        theirs: { method: 'PUT', body: external('theirs') },
        shown: (answer) => answer.body.name,
      };
    },
    'artifact version': async () => {
      const versionName = `v-${unique()}`;
      await uploadVersion(server, caller, projectId, environment, versionName, { 'pipelines/run.orch.yaml': RUN });
      const enabled = (value: boolean) => ({ environmentName: environment, versionName, enabled: value });
      return {
        // The GET of this URL is the environment's list of versions (the body names the version).
        path: `/projects/${projectId}/artifacts?environmentName=${environment}&size=100`,
        mine: { method: 'PATCH', body: enabled(true) },
        theirs: { method: 'PATCH', body: enabled(false) },
        shown: (answer) => (byName(answer, 'versionName', versionName)?.enabled ? 'mine' : 'theirs'),
      };
    },
  };

  const read = (path: string) => server.api('GET', path, { token: caller.token });
  const send = (path: string, write: Write, ifMatch?: string) =>
    server.api(write.method, write.path ?? path, {
      token: caller.token,
      body: write.body,
      headers: ifMatch === undefined ? {} : { 'if-match': ifMatch },
    });
  const succeeded = (answer: Answer) => assert.ok(answer.status >= 200 && answer.status < 300, answer.text);

  for (const [area, make] of Object.entries(resources)) {
    test(`If-Match (${area}): the current ETag passes, a stale one is 412, and a write without If-Match landing between the check and the write makes it 412`, async () => {
      // The current version: the write is done.
      {
        const resource = await make();
        const tag = (await read(resource.path)).headers.get('etag')!;
        succeeded(await send(resource.path, resource.mine, tag));
        const after = await read(resource.path);
        if (resource.mine.method === 'DELETE') assert.equal(after.status, 404);
        else assert.equal(resource.shown!(after), 'mine');
      }
      // A stale version (theirs came first): 412, and theirs stands.
      {
        const resource = await make();
        const tag = (await read(resource.path)).headers.get('etag')!;
        succeeded(await send(resource.path, resource.theirs));
        const lost = expectProblem(await send(resource.path, resource.mine, tag), 412);
        assert.deepEqual(lost.violations, ['If-Match: does not name the current version']);
        const after = await read(resource.path);
        if (resource.shown) assert.equal(resource.shown(after), 'theirs');
        else assert.equal(after.status, 404);
      }
      // Theirs lands after the check passed, just before mine writes: the write's own comparison makes it 412.
      {
        const resource = await make();
        const tag = (await read(resource.path)).headers.get('etag')!;
        const { answer, reads, landed } = await between(
          resource.path,
          async () => succeeded(await send(resource.path, resource.theirs)),
          () => send(resource.path, resource.mine, tag),
        );
        assert.ok(landed, 'their write landed between the check and the write');
        assert.equal(reads, 1, "the check passed at once: the 412 is the write's");
        expectProblem(answer, 412);
        const after = await read(resource.path);
        if (resource.shown) assert.equal(resource.shown(after), 'theirs', 'their write stands');
        else assert.equal(after.status, 404);
      }
    });
  }

  test('a connection named in the list filter too: the ETag of that page (the connection alone) is what If-Match names', async () => {
    const name = `c-${unique()}`;
    const details = (secretName: string) => ({
      authType: 'GENERIC_SECRET',
      platformConnectionType: 'COMPONENT_BASIC',
      connectionDetails: { connectionProperties: { secretName } },
    });
    await post(`/projects/${projectId}/connections`, { name, ...details('v1') });
    const path = `/projects/${projectId}/connections?connectionName=${name}&connectionNames=${name}`;
    const page = await read(path);
    assert.deepEqual(
      page.body.results.map((connection: { name: string }) => connection.name),
      [name],
    );
    const tag = page.headers.get('etag')!;
    // Another connection of the project changes: not this page, whose tag still passes.
    await post(`/projects/${projectId}/connections`, { name: `other-${unique()}`, ...details('v1') });
    succeeded(await send(path, { method: 'PUT', body: details('mine') }, tag));
    expectProblem(await send(path, { method: 'PUT', body: details('again') }, tag), 412);
  });

  test("the scheduler's move of a schedule's next due time is a version on: a write whose check saw the earlier time is 412", async () => {
    const { scheduleId } = await post(`/projects/${projectId}/schedules`, {
      name: `moving ${unique()}`,
      cronExpression: '* * * * *',
      pipelineName: 'pipelines/run.orch.yaml',
      environmentName: environment,
      scheduleEnabled: true,
    });
    const path = `/projects/${projectId}/schedules/${scheduleId}`;
    // Due in 1.5 s: the check below reads it before the scheduler (a tick a second) moves it on.
    const dueAt = new Date(Date.now() + 1500).toISOString();
    await server.db.updateTable('schedules').set({ nextRunAt: dueAt }).where('id', '=', scheduleId).execute();
    const version = async () =>
      Number(
        (await server.db.selectFrom('schedules').select('rowVersion').where('id', '=', scheduleId).executeTakeFirstOrThrow())
          .rowVersion,
      );
    const due = await read(path);
    assert.equal(due.body.nextRunAt, dueAt);
    const dueVersion = await version();
    // The check reads the due time and passes; the scheduler moves the schedule on before the write.
    const mine = await between(
      path,
      () =>
        eventually(
          () => read(path),
          (answer) => answer.body.nextRunAt !== dueAt,
        ),
      () =>
        server.api('PATCH', path, {
          token: caller.token,
          body: { name: 'renamed' },
          headers: { 'if-match': due.headers.get('etag')! },
        }),
    );
    assert.deepEqual([mine.landed, mine.reads], [true, 1]);
    expectProblem(mine.answer, 412);
    const moved = await read(path);
    assert.ok(moved.body.nextRunAt > dueAt, 'the move stands');
    assert.notEqual(moved.headers.get('etag'), due.headers.get('etag'));
    assert.ok((await version()) > dueVersion, 'the version moved with the due time');
    // A write without If-Match that does not change the timing leaves the moved due time as it is.
    const renamed = await server.api('PATCH', path, { token: caller.token, body: { name: 'renamed' } });
    assert.equal(renamed.status, 200, renamed.text);
    assert.equal(renamed.body.nextRunAt, moved.body.nextRunAt);
  });

  // A row lock held by another transaction while a write waits on it: PostgreSQL only (SQLite has no row locks).
  if (kind === 'postgres')
    test('If-Match compares the version in the write itself: a write committed after the check makes it 412', async () => {
      const created = await server.api('POST', '/webhooks', {
        token: caller.token,
        body: { url: 'https://hooks.example.com/d', description: 'v1' },
      });
      const id = created.body.webhookId as string;
      const path = `/webhooks/${id}`;
      const v1 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
      // Another writer has changed the row and not committed yet: the check still sees v1 (committed), the
      // write waits for the row, and finds another version once that writer commits.
      const other = new pg.Client({ connectionString: server.server.app.config.databaseUrl });
      await other.connect();
      try {
        await other.query('begin');
        await other.query(`update webhooks set description = 'theirs', row_version = row_version + 1 where id = $1`, [id]);
        const mine = server.api('PATCH', path, {
          token: caller.token,
          body: { description: 'mine' },
          headers: { 'if-match': v1 },
        });
        // The If-Match request has passed its check and waits on the row lock.
        for (let i = 0; i < 100; i += 1) {
          const { rows } = await other.query(
            `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like 'update "webhooks"%'`,
          );
          if (rows[0].n > 0) break;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        await other.query('commit');
        expectProblem(await mine, 412);
      } finally {
        await other.end();
      }
      assert.equal((await server.api('GET', path, { token: caller.token })).body.description, 'theirs');
    });

  test('concurrent writes with one If-Match: one wins, the others are 412', async () => {
    const created = await server.api('POST', '/webhooks', { token: caller.token, body: { url: 'https://hooks.example.com/b' } });
    const path = `/webhooks/${created.body.webhookId}`;
    const tag = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        server.api('PATCH', path, { token: caller.token, body: { description: `writer ${i}` }, headers: { 'if-match': tag } }),
      ),
    );
    assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, 412, 412, 412, 412]);
  });

  test('concurrent writes with one If-Match through two server instances: one wins, the others are 412', async () => {
    const beside = await TestServer.startBeside(server);
    try {
      for (const [i, resource] of (['webhook', 'schedule'] as const).entries()) {
        const path = await createWebhookOrSchedule(resource, `nightly ${i}`);
        const body = (n: number) => (resource === 'webhook' ? { description: `writer ${n}` } : { name: `nightly ${i} ${n}` });
        const tag = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
        const answers = await Promise.all(
          Array.from({ length: 6 }, (_, n) =>
            (n % 2 ? server : beside).api('PATCH', path, { token: caller.token, body: body(n), headers: { 'if-match': tag } }),
          ),
        );
        assert.deepEqual(
          answers.map((answer) => answer.status).sort(),
          [200, 412, 412, 412, 412, 412],
          `${resource}: ${answers.map((answer) => answer.text).join('\n')}`,
        );
      }
    } finally {
      await beside.close();
    }
  });
});
