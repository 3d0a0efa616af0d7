import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { assertRunEvent } from '../helpers/openlineage.ts';

export function pipelineBody(agentId: string, name = 'orders-cdc') {
  return {
    name,
    agentId,
    advancedProperties: { 'snapshot.mode': 'initial' },
    streamingSource: {
      type: 'postgres',
      connection: {
        host: 'db.internal',
        port: 5432,
        database: 'orders',
        username: 'replicator',
        password: {
          secretName: 'orders-db',
          secretKey: 'password',
          secretType: 'PASSWORD',
          secretLocation: 'MATILLION_CUSTOMER_VAULT',
        },
        jdbcProperties: { sslmode: 'require' },
      },
      tables: [{ schema: 'public', table: 'orders' }],
    },
    streamingTarget: {
      type: 'abs',
      accountName: 'lake',
      accountKey: { secretName: 'lake', secretKey: 'key' },
      container: 'cdc',
      prefix: 'orders/',
      decimalMapping: 'LOGICAL',
    },
  };
}

describeEachStore('streaming pipelines (E19)', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let projectId: string;
  let agentId: string;
  let agentToken: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, projectId } = await server.prologue());
    const created = await api('POST', '/agents', {
      name: 'runner',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'azure',
      deployment: 'aks',
    });
    agentId = created.body.agentId;
    const credentials = (await api('POST', `/agents/${agentId}/credentials`)).body;
    agentToken = await server.token(credentials.clientId, credentials.clientSecret);
  });
  after(() => server.close());

  const api = (method: string, apiPath: string, body?: unknown, token = caller.token) =>
    server.api(method, apiPath, { token, body });
  const pipelines = (project = projectId) => `/projects/${project}/streaming-pipelines`;
  const agentCall = (method: string, apiPath: string, body?: unknown) =>
    server.request(method, `/dpc/agent/v1${apiPath}`, { token: agentToken, body });

  test('the page may be empty; create (201), read, list paged, replace, delete', async () => {
    const project = await server.newProject(caller);
    assert.deepEqual((await api('GET', pipelines(project))).body, { page: 0, results: [], size: 25, total: 0 });
    const created = await api('POST', pipelines(project), pipelineBody(agentId));
    assert.equal(created.status, 201, created.text);
    const { streamingPipelineId } = created.body;
    assert.equal(created.headers.get('location'), `/dpc/v1${pipelines(project)}/${streamingPipelineId}`);
    assert.deepEqual(created.body, { ...pipelineBody(agentId), streamingPipelineId, projectId: project, status: 'STOPPED' });
    assert.deepEqual((await api('GET', `${pipelines(project)}/${streamingPipelineId}`, undefined, viewer)).body, created.body);
    expectProblem(await api('POST', pipelines(project), pipelineBody(agentId)), 409);
    await api('POST', pipelines(project), pipelineBody(agentId, 'b-second'));
    const page = await api('GET', `${pipelines(project)}?page=1&size=1`);
    assert.deepEqual(
      page.body.results.map((p: { name: string }) => p.name),
      ['orders-cdc'],
    );
    assert.equal(page.body.total, 2);
    assert.equal((await api('GET', `${pipelines(project)}?agentId=${agentId}&status=RUNNING`)).body.total, 0);

    const replaced = await api('PUT', `${pipelines(project)}/${streamingPipelineId}`, {
      ...pipelineBody(agentId, 'renamed'),
      advancedProperties: undefined,
    });
    assert.equal(replaced.status, 200, replaced.text);
    assert.equal(replaced.body.name, 'renamed');
    assert.deepEqual(replaced.body.advancedProperties, {});
    assert.equal((await api('DELETE', `${pipelines(project)}/${streamingPipelineId}`)).status, 204);
    expectProblem(await api('GET', `${pipelines(project)}/${streamingPipelineId}`), 404);
    expectProblem(await api('POST', pipelines(project), pipelineBody(agentId, 'v'), viewer), 403);
  });

  test('secret values are refused where a secret reference belongs (400 naming the field, never the value)', async () => {
    const body = pipelineBody(agentId, 'leaky');
    const plain = structuredClone(body) as any;
    plain.streamingSource.connection.password = 'hunter2-plain';
    const refused = expectProblem(await api('POST', pipelines(), plain), 400);
    assert.ok(!JSON.stringify(refused).includes('hunter2-plain'));
    const valued = structuredClone(body) as any;
    valued.streamingTarget.accountKey = { secretName: 'lake', value: 'hunter2-key' };
    const named = expectProblem(await api('POST', pipelines(), valued), 400);
    assert.deepEqual(named.violations, [
      'body.streamingTarget.accountKey.value: a secret reference holds only secretName, secretType, secretKey, secretLocation, key, never a value',
    ]);
    const inProperties = structuredClone(body) as any;
    inProperties.streamingSource.connection.jdbcProperties = { password: 'hunter2' };
    expectProblem(await api('POST', pipelines(), inProperties), 400);
    const missingName = structuredClone(body) as any;
    missingName.streamingSource.connection.password = { secretKey: 'password' };
    expectProblem(await api('POST', pipelines(), missingName), 400);
    assert.equal((await api('GET', pipelines())).body.results.filter((p: { name: string }) => p.name === 'leaky').length, 0);
  });

  test("the agent must be one of the account's; another account sees nothing", async () => {
    const stranger = await server.newAccount('stranger');
    const theirs = await api(
      'POST',
      '/agents',
      { name: 'theirs', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'eks' },
      stranger.token,
    );
    const foreign = expectProblem(await api('POST', pipelines(), pipelineBody(theirs.body.agentId, 'foreign')), 422);
    assert.deepEqual(foreign.violations, ['body.agentId: is not an agent of this account']);
    const created = await api('POST', pipelines(), pipelineBody(agentId, 'mine'));
    expectProblem(await api('GET', pipelines(), undefined, stranger.token), 404);
    expectProblem(await api('GET', `${pipelines()}/${created.body.streamingPipelineId}`, undefined, stranger.token), 404);
    expectProblem(await api('DELETE', `/agents/${agentId}`), 409);
  });

  test('start and stop go to the agent as work; the status follows its reports', async () => {
    const created = await api('POST', pipelines(), pipelineBody(agentId, 'running'));
    const id = created.body.streamingPipelineId;
    const status = () => api('GET', `${pipelines()}/${id}/status`).then((a) => a.body);
    expectProblem(await api('POST', `${pipelines()}/${id}/stop`), 409);
    const starting = await api('POST', `${pipelines()}/${id}/start`);
    assert.equal(starting.status, 202, starting.text);
    assert.equal(starting.body.status, 'STARTING');
    expectProblem(await api('POST', `${pipelines()}/${id}/start`), 409);
    expectProblem(await api('PUT', `${pipelines()}/${id}`, pipelineBody(agentId, 'running')), 409);
    const work = await agentCall('GET', '/work?waitSeconds=2');
    assert.equal(work.body.kind, 'streaming-pipeline-start');
    assert.equal(work.body.payload.streamingPipelineId, id);
    assert.deepEqual(
      work.body.payload.definition.streamingSource.connection.password,
      pipelineBody(agentId).streamingSource.connection.password,
    );
    await agentCall('POST', `/work/${work.body.workId}/reports`, { type: 'done', body: { state: 'RUNNING' } });
    assert.equal((await status()).status, 'RUNNING');
    expectProblem(await api('DELETE', `${pipelines()}/${id}`), 409);

    assert.equal((await api('POST', `${pipelines()}/${id}/stop`)).body.status, 'STOPPING');
    const stop = await agentCall('GET', '/work?waitSeconds=2');
    assert.equal(stop.body.kind, 'streaming-pipeline-stop');
    await agentCall('POST', `/work/${stop.body.workId}/reports`, { type: 'done' });
    assert.equal((await status()).status, 'STOPPED');

    await api('POST', `${pipelines()}/${id}/start`);
    const again = await agentCall('GET', '/work?waitSeconds=2');
    await agentCall('POST', `/work/${again.body.workId}/reports`, { type: 'failed', body: { message: 'source unreachable' } });
    assert.deepEqual(
      { ...(await status()), changedAt: undefined },
      { streamingPipelineId: id, status: 'FAILED', message: 'source unreachable', changedAt: undefined },
    );
  });

  test("a run's lineage: source tables → the target's folders, START, first rows, COMPLETE; tables not the pipeline's are refused", async () => {
    const body = pipelineBody(agentId, 'lineage');
    body.streamingSource.tables.push({ schema: 'public', table: 'customers' });
    const id = (await api('POST', pipelines(), body)).body.streamingPipelineId;
    assert.equal((await api('POST', `${pipelines()}/${id}/start`)).status, 202);
    const work = await agentCall('GET', '/work?waitSeconds=2');
    const progress = (rowsPerTable: Record<string, number>) => ({
      type: 'progress',
      body: {
        state: 'RUNNING',
        phase: 'streaming',
        position: '0/16B3748',
        lagSeconds: 0,
        rowsPerTable,
        reportedAt: new Date().toISOString(),
      },
    });
    const report = (reported: unknown) => agentCall('POST', `/work/${work.body.workId}/reports`, reported);
    assert.equal((await report(progress({}))).status, 200);
    assert.equal((await report(progress({ 'public.orders': 5 }))).status, 200);
    assert.equal((await report(progress({ 'public.orders': 9 }))).status, 200);
    const forged = expectProblem(await report(progress({ 'public.orders': 9, 'private.salaries': 1 })), 400);
    assert.deepEqual(forged.violations, ['body.rowsPerTable.private.salaries: not a table of this streaming pipeline']);
    assert.equal(
      (await report({ type: 'done', body: { state: 'STOPPED', position: '0/16B3748', rowsPerTable: {} } })).status,
      200,
    );

    const page = await api('GET', `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`);
    const events = page.body.results
      .map((result: { event: any }) => result.event)
      .filter((event: any) => event.run.runId === work.body.workId);
    for (const event of events) assertRunEvent(event);
    assert.deepEqual(
      events.map((event: any) => [
        event.eventType,
        event.inputs.map((input: any) => `${input.namespace}/${input.name}`),
        event.outputs.map((output: any) => `${output.namespace}/${output.name}`),
      ]),
      [
        [
          'START',
          ['postgres://db.internal:5432/orders.public.orders', 'postgres://db.internal:5432/orders.public.customers'],
          [
            'abfss://cdc@lake.dfs.core.windows.net/orders/public/orders',
            'abfss://cdc@lake.dfs.core.windows.net/orders/public/customers',
          ],
        ],
        [
          'RUNNING',
          ['postgres://db.internal:5432/orders.public.orders'],
          ['abfss://cdc@lake.dfs.core.windows.net/orders/public/orders'],
        ],
        [
          'COMPLETE',
          ['postgres://db.internal:5432/orders.public.orders', 'postgres://db.internal:5432/orders.public.customers'],
          [
            'abfss://cdc@lake.dfs.core.windows.net/orders/public/orders',
            'abfss://cdc@lake.dfs.core.windows.net/orders/public/customers',
          ],
        ],
      ],
    );
    assert.equal(events[0].job.name, 'lineage');
    assert.equal(events[0].job.namespace, `dpc://${caller.accountId}.${projectId}`);
    assert.equal(events[0].job.facets.jobType.processingType, 'STREAMING');
    // Another account sees none of it.
    const other = await server.newAccount('lineage-other');
    const theirs = await api(
      'GET',
      `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}`,
      undefined,
      other.token,
    );
    assert.equal(theirs.body.total, 0);
  });

  test("a stopped run's lineage ends with the stop's report: COMPLETE when it is done, FAIL when it fails", async () => {
    const id = (await api('POST', pipelines(), pipelineBody(agentId, 'stopped-lineage'))).body.streamingPipelineId;
    const progress = {
      type: 'progress',
      body: {
        state: 'RUNNING',
        phase: 'streaming',
        position: '0/1',
        lagSeconds: 0,
        rowsPerTable: {},
        reportedAt: new Date().toISOString(),
      },
    };
    const eventsOf = async (runId: string) => {
      const page = await api('GET', `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`);
      const events = page.body.results
        .map((result: { event: any }) => result.event)
        .filter((event: any) => event.run.runId === runId);
      for (const event of events) assertRunEvent(event);
      return events.map((event: any) => [event.eventType, event.outputs.map((output: any) => output.name)]);
    };
    for (const [outcome, expected] of [
      [{ type: 'done' }, 'COMPLETE'],
      [{ type: 'failed', body: { message: 'the slot could not be released' } }, 'FAIL'],
    ] as const) {
      assert.equal((await api('POST', `${pipelines()}/${id}/start`)).status, 202);
      const run = await agentCall('GET', '/work?waitSeconds=2');
      assert.equal((await agentCall('POST', `/work/${run.body.workId}/reports`, progress)).status, 200);
      assert.equal((await api('POST', `${pipelines()}/${id}/stop`)).status, 202);
      const stop = await agentCall('GET', '/work?waitSeconds=2');
      assert.equal(stop.body.kind, 'streaming-pipeline-stop');
      assert.equal(stop.body.payload.runId, run.body.workId, 'the stop names the run it ends');
      // The run's own final report, on work the stop cancelled, is taken but moves nothing.
      assert.equal(
        (await agentCall('POST', `/work/${run.body.workId}/reports`, { type: 'done', body: { state: 'STOPPED' } })).status,
        200,
      );
      assert.deepEqual(await eventsOf(run.body.workId), [['START', ['orders/public/orders']]]);
      assert.equal((await agentCall('POST', `/work/${stop.body.workId}/reports`, outcome)).status, 200);
      assert.deepEqual(await eventsOf(run.body.workId), [
        ['START', ['orders/public/orders']],
        [expected, ['orders/public/orders']],
      ]);
    }
  });

  test('a run that ends before its first progress report records a START first, then FAIL or COMPLETE (OpenLineage: every run has a START)', async () => {
    const id = (await api('POST', pipelines(), pipelineBody(agentId, 'early-end'))).body.streamingPipelineId;
    const eventsOf = async (runId: string) => {
      const page = await api('GET', `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`);
      const events = page.body.results
        .map((result: { event: any }) => result.event)
        .filter((event: any) => event.run.runId === runId);
      for (const event of events) assertRunEvent(event);
      return events.map((event: any) => [event.eventType, event.outputs.map((output: any) => output.name)]);
    };
    // The run itself fails, or ends by itself, before any progress report.
    for (const [outcome, expected] of [
      [{ type: 'failed', body: { message: 'source unreachable' } }, 'FAIL'],
      [{ type: 'done', body: { state: 'STOPPED' } }, 'COMPLETE'],
    ] as const) {
      assert.equal((await api('POST', `${pipelines()}/${id}/start`)).status, 202);
      const run = await agentCall('GET', '/work?waitSeconds=2');
      assert.equal((await agentCall('POST', `/work/${run.body.workId}/reports`, outcome)).status, 200);
      assert.deepEqual(await eventsOf(run.body.workId), [
        ['START', ['orders/public/orders']],
        [expected, ['orders/public/orders']],
      ]);
    }
  });

  test('a run whose agent vanished can be stopped by force; a late report then moves nothing', async () => {
    const created = await api('POST', pipelines(), pipelineBody(agentId, 'orphaned'));
    const id = created.body.streamingPipelineId;
    const status = () => api('GET', `${pipelines()}/${id}/status`).then((a) => a.body);
    await api('POST', `${pipelines()}/${id}/start`);
    const work = await agentCall('GET', '/work?waitSeconds=2');
    assert.equal(work.body.payload.streamingPipelineId, id);
    expectProblem(await api('POST', `${pipelines()}/${id}/stop`), 409);
    // The run had begun: its lineage has a START, and nothing will end it but the forced stop (ABORT).
    const progress = {
      state: 'RUNNING',
      phase: 'snapshot',
      position: '0/1',
      lagSeconds: 0,
      rowsPerTable: {},
      reportedAt: new Date().toISOString(),
    };
    assert.equal(
      (await agentCall('POST', `/work/${work.body.workId}/reports`, { type: 'progress', body: progress })).status,
      200,
    );
    const forced = await api('POST', `${pipelines()}/${id}/stop?force=true`);
    assert.equal(forced.status, 202, forced.text);
    assert.equal(forced.body.status, 'STOPPED');
    const page = await api('GET', `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`);
    const events = page.body.results
      .map((result: { event: any }) => result.event)
      .filter((event: any) => event.run.runId === work.body.workId);
    for (const event of events) assertRunEvent(event);
    assert.deepEqual(
      events.map((event: any) => event.eventType),
      ['START', 'ABORT'],
    );
    const late = await agentCall('POST', `/work/${work.body.workId}/reports`, { type: 'done' });
    assert.equal(late.status, 200, late.text);
    assert.equal((await status()).status, 'STOPPED');
    expectProblem(await api('POST', `${pipelines()}/${id}/stop?force=true`), 409);
    assert.equal((await api('DELETE', `${pipelines()}/${id}`)).status, 204);
  });

  test('credentials are refused under any credential-like key name and inside values such as JDBC URLs', async () => {
    const body = pipelineBody(agentId, 'leaky-values');
    for (const key of ['sslpassword', 'trustCertificateKeyStorePassword', 'oracle.net.wallet_password', 'user.password']) {
      const named = structuredClone(body) as any;
      named.streamingSource.connection.jdbcProperties = { [key]: 'hunter2-k' };
      const refused = expectProblem(await api('POST', pipelines(), named), 400);
      assert.ok(!JSON.stringify(refused).includes('hunter2-k'));
    }
    const inUrl = structuredClone(body) as any;
    inUrl.advancedProperties = { 'connection.url': 'jdbc:postgresql://db.internal/orders?user=a&password=hunter2-url' };
    const url = expectProblem(await api('POST', pipelines(), inUrl), 400);
    assert.ok(!JSON.stringify(url).includes('hunter2-url'));
    assert.ok(
      (url.violations ?? []).some((v: string) => v.startsWith('body.advancedProperties.connection.url:')),
      JSON.stringify(url.violations),
    );
    const inJdbc = structuredClone(body) as any;
    inJdbc.streamingSource.connection.jdbcProperties = { options: 'ssl=true;pwd=hunter2-pwd' };
    expectProblem(await api('POST', pipelines(), inJdbc), 400);
    const inHost = structuredClone(body) as any;
    inHost.streamingSource.connection.host = 'db.internal?password=hunter2-host';
    expectProblem(await api('POST', pipelines(), inHost), 400);
    assert.equal((await api('POST', pipelines(), body)).status, 201);
  });

  test('what an outside attack stored is refused: credential names and credential-carrying values anywhere in the definition (issue 36)', async () => {
    const body = pipelineBody(agentId, 'attacked');
    const cases: Array<[(b: any) => void, string]> = [
      [(b) => (b.advancedProperties = { apikey: 'leak-1-value' }), 'body.advancedProperties.apikey'],
      [(b) => (b.advancedProperties = { 'X-Auth-Token': 'leak-2-value' }), 'body.advancedProperties.X-Auth-Token'],
      [
        (b) => (b.streamingSource.connection.host = 'replicator:leak-3-value@db.internal'),
        'body.streamingSource.connection.host',
      ],
      [
        (b) => (b.advancedProperties = { 'connection.url': 'jdbc:postgresql://db/orders?user=a&p%61ssword=leak-4-value' }),
        'body.advancedProperties.connection.url',
      ],
      [
        (b) => (b.advancedProperties = { 'mongo.uri': 'mongodb://u:leak-5-value@mongo.internal/app' }),
        'body.advancedProperties.mongo.uri',
      ],
      [
        (b) =>
          (b.advancedProperties = {
            'bus.connection': 'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=leak-6-value',
          }),
        'body.advancedProperties.bus.connection',
      ],
      [(b) => (b.advancedProperties = { 'http.header': 'Bearer leak-7-value-0123' }), 'body.advancedProperties.http.header'],
      [
        (b) => (b.streamingSource.connection.database = 'orders;password=leak-8-value'),
        'body.streamingSource.connection.database',
      ],
      [
        (b) => (b.streamingTarget.prefix = 'https://acct.blob.core.windows.net/c?sv=1&sig=leak-9-value'),
        'body.streamingTarget.prefix',
      ],
    ];
    const created = await api('POST', pipelines(), body);
    assert.equal(created.status, 201, created.text);
    const at = `${pipelines()}/${created.body.streamingPipelineId}`;
    for (const [index, [change, field]] of cases.entries()) {
      const leaky = structuredClone(body) as any;
      change(leaky);
      for (const [method, path] of [
        ['POST', pipelines()],
        ['PUT', at],
      ] as const) {
        const refused = expectProblem(await api(method, path, leaky), 400);
        assert.ok(!JSON.stringify(refused).includes(`leak-${index + 1}-value`), `case ${index + 1} echoed`);
        assert.ok(
          (refused.violations ?? []).some((v: string) => v.startsWith(`${field}:`)),
          `case ${index + 1}: ${JSON.stringify(refused.violations)}`,
        );
      }
    }
    const listed = await api('GET', pipelines(), undefined, viewer);
    assert.equal(listed.status, 200);
    assert.ok(!/leak-\d-value/.test(listed.text));
  });

  test('concurrent starts of a stopped pipeline hand its agent one run: one 202, the others 409', async () => {
    const created = await api('POST', pipelines(), pipelineBody(agentId, 'raced'));
    const id = created.body.streamingPipelineId;
    const answers = await Promise.all(Array.from({ length: 6 }, () => api('POST', `${pipelines()}/${id}/start`)));
    assert.deepEqual(answers.map((answer) => answer.status).sort(), [202, 409, 409, 409, 409, 409]);
    const runs = await server.db
      .selectFrom('agentWork')
      .select('payload')
      .where('kind', '=', 'streaming-pipeline-start')
      .where('state', '=', 'queued')
      .execute();
    assert.equal(runs.filter((run) => run.payload?.includes(id)).length, 1);
    const work = await agentCall('GET', '/work?waitSeconds=2');
    assert.equal(work.body.payload.streamingPipelineId, id);
    await agentCall('POST', `/work/${work.body.workId}/reports`, { type: 'done' });
  });

  test('definitions stored in the older shape are read, upgraded where certain, and refused at start with what does not fit', async () => {
    const project = await server.newProject(caller);
    const legacy = (name: string, definition: unknown) => ({
      id: crypto.randomUUID(),
      projectId: project,
      agentId,
      name,
      definition: JSON.stringify(definition),
      status: 'STOPPED',
      statusMessage: null,
      statusChangedAt: new Date().toISOString(),
      createdAt: new Date().toISOString(),
    });
    const reference = { secretName: 'orders-db', secretKey: 'password', secretLocation: 'MATILLION_CUSTOMER_VAULT' };
    const upgradable = legacy('old-fits', {
      streamingSource: {
        type: 'POSTGRES',
        connection: { host: 'db', port: 5432, username: 'u', password: reference, jdbcProperties: { databaseName: 'orders' } },
        tables: [{ schema: 'public', table: 'orders' }],
      },
      streamingTarget: { type: 'AZURE_BLOB', accountName: 'lake', accountKey: reference, container: 'cdc' },
    });
    const unfit = legacy('old-unfit', {
      advancedProperties: { 'snapshot.mode': 'never' },
      streamingSource: {
        type: 'MARIADB',
        connection: { host: 'db', port: 3306, username: 'u', password: reference },
        tables: [{ schema: 'shop', table: 'orders' }],
      },
      streamingTarget: { type: 'S3', prefix: 'cdc/', decimalMapping: 'STRING' },
    });
    await server.db.insertInto('streamingPipelines').values([upgradable, unfit]).execute();

    const fits = await api('GET', `${pipelines(project)}/${upgradable.id}`, undefined, viewer);
    assert.equal(fits.status, 200, fits.text);
    assert.deepEqual(fits.body.streamingSource, {
      type: 'postgres',
      connection: { host: 'db', port: 5432, username: 'u', password: reference, database: 'orders' },
      tables: [{ schema: 'public', table: 'orders' }],
    });
    assert.equal(fits.body.streamingTarget.type, 'abs');
    assert.equal(fits.body.definitionProblems, undefined);

    const list = await api('GET', pipelines(project), undefined, viewer);
    assert.equal(list.status, 200, list.text);
    const old = list.body.results.find((p: { name: string }) => p.name === 'old-unfit');
    assert.equal(old.streamingSource.type, 'mysql');
    assert.deepEqual(old.streamingTarget, { type: 's3', prefix: 'cdc/', decimalMapping: 'STRING' });
    assert.ok(
      old.definitionProblems.some((p: string) => p.startsWith('streamingTarget')),
      JSON.stringify(old.definitionProblems),
    );

    const refused = expectProblem(await api('POST', `${pipelines(project)}/${unfit.id}/start`), 409);
    assert.ok(
      (refused.violations ?? []).some((v: string) => v.startsWith('streamingTarget')),
      JSON.stringify(refused.violations),
    );
    assert.equal((await api('GET', `${pipelines(project)}/${unfit.id}`)).body.status, 'STOPPED');

    const rewritten = pipelineBody(agentId, 'old-unfit');
    assert.equal((await api('PUT', `${pipelines(project)}/${unfit.id}`, rewritten)).status, 200);
    const read = (await api('GET', `${pipelines(project)}/${unfit.id}`)).body;
    assert.equal(read.definitionProblems, undefined);

    const started = await api('POST', `${pipelines(project)}/${upgradable.id}/start`);
    assert.equal(started.status, 202, started.text);
    const work = await agentCall('GET', '/work?waitSeconds=2');
    assert.equal(work.body.payload.definition.streamingSource.type, 'postgres');
    assert.equal(work.body.payload.definition.streamingSource.connection.database, 'orders');
    await agentCall('POST', `/work/${work.body.workId}/reports`, { type: 'done' });
  });
});
