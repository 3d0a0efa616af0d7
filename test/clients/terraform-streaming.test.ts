import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

/**
 * The vendor's infrastructure-as-code provider for agents and streaming pipelines
 * (matillion-public/terraform-provider-matillion-streaming), replayed call by call as its Go client makes
 * them (internal/client/*.go): an OAuth client-credentials token with `audience`, HTTP Basic for the client;
 * on every call `account-id` and the bearer token; `Content-Type: application/json` only where there is a
 * body; each call fails unless the status is exactly the one the client expects. Bodies are what its
 * mappers (pipeline_state_to_api_mapper.go) marshal: Go field order, `""` for an unset optional field
 * without `omitempty` (S3 and ABS `prefix`), nothing for one with it (`key`, `pdb`, `stagePrefix`, ...).
 */
class ProviderClient {
  constructor(
    private readonly server: TestServer,
    private readonly accountId: string,
    private readonly token: string,
  ) {}

  /** client.go doRequest: the expected status or an error with the answer. */
  async doRequest(method: string, path: string, body: unknown, expectedStatus: number): Promise<any> {
    const headers: Record<string, string> = {
      'user-agent': 'Go-http-client/1.1',
      'accept-encoding': 'gzip',
      'account-id': this.accountId,
      authorization: `Bearer ${this.token}`,
    };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const answer = await this.server.request(method, `/dpc/v1${path}`, {
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    assert.equal(answer.status, expectedStatus, `${method} ${path}: status code: ${answer.status}, response: ${answer.text}`);
    return answer.body;
  }

  /** agent.go List and pipeline.go List: page after page until one is short. */
  async list(path: string): Promise<any[]> {
    const all = [];
    for (let page = 0; ; page++) {
      const response = await this.doRequest('GET', `${path}?page=${page}`, undefined, 200);
      if (response.results.length === 0) break;
      all.push(...response.results);
      if (response.results.length < response.size) break;
    }
    return all;
  }
}

const secret = (secretName: string, key?: string) => ({
  secretType: 'aws_secrets_manager',
  secretName,
  ...(key !== undefined && { key }),
});
const tables = [{ schema: 'public', table: 'orders' }];

/** Every source type as the provider marshals it (client/models.go field order; omitempty honoured). */
const sources = {
  postgres: {
    type: 'postgres',
    connection: { host: 'pg.internal', port: 5432, database: 'orders', username: 'cdc', password: secret('pg', 'password') },
    tables,
  },
  sqlserver: {
    type: 'sqlserver',
    connection: {
      host: 'mssql.internal',
      port: 1433,
      database: 'sales',
      username: 'cdc',
      password: secret('mssql', 'password'),
      jdbcProperties: { encrypt: 'true', trustServerCertificate: 'false' },
    },
    tables: [{ schema: 'dbo', table: 'invoices' }],
  },
  mysql: {
    type: 'mysql',
    connection: { host: 'mysql.internal', port: 3306, username: 'cdc', password: secret('mysql') },
    tables: [{ schema: 'shop', table: 'carts' }],
  },
  oracle: {
    type: 'oracle',
    connection: {
      host: 'ora.internal',
      port: 1521,
      database: 'ORCLCDB',
      pdb: 'ORCLPDB1',
      username: 'c##cdc',
      password: { secretType: 'azure_key_vault', secretName: 'ora', key: 'pw' },
    },
    tables: [{ schema: 'HR', table: 'EMPLOYEES' }],
  },
  db2ibmi: {
    type: 'db2ibmi',
    connection: { host: 'as400.internal', port: 8471, username: 'CDC', password: secret('db2', 'password') },
    tables: [{ schema: 'LIB', table: 'ORDERS' }],
  },
};

const targets = {
  s3: { type: 's3', bucket: 'lake', prefix: '' },
  s3WithMapping: { type: 's3', bucket: 'lake', prefix: 'cdc/orders', decimalMapping: 'logical' },
  abs: {
    type: 'abs',
    container: 'cdc',
    prefix: '',
    accountName: 'lakeacct',
    accountKey: { secretType: 'azure_key_vault', secretName: 'lake', key: 'accountKey' },
    decimalMapping: 'legacy',
  },
  snowflake: {
    type: 'snowflake',
    connection: {
      accountName: 'acme-eu1',
      username: 'STREAMING',
      authentication: {
        type: 'key-pair',
        privateKey: { secretType: 'aws_secrets_manager', secretName: 'sf-key' },
        passphrase: { secretType: 'aws_secrets_manager', secretName: 'sf-passphrase' },
      },
      jdbcProperties: { application: 'streaming' },
    },
    role: 'STREAMING_ROLE',
    warehouse: 'STREAMING_WH',
    database: 'RAW',
    stageSchema: 'STAGE',
    stageName: 'CDC_STAGE',
    stagePrefix: 'orders',
    tableSchema: 'ORDERS',
    tablePrefixType: 'source_database_and_schema',
    transformationType: 'copy_table_soft_delete',
    temporalMapping: 'epoch',
  },
  snowflakeMinimal: {
    type: 'snowflake',
    connection: {
      accountName: 'acme-eu1',
      username: 'STREAMING',
      authentication: { type: 'key-pair', privateKey: { secretType: 'google_secret_manager', secretName: 'sf-key' } },
    },
    role: 'R',
    warehouse: 'W',
    database: 'D',
    stageSchema: 'S',
    stageName: 'N',
    tableSchema: 'T',
    tablePrefixType: 'none',
    transformationType: 'change_log',
  },
};

describeEachStore("the vendor's Terraform provider for agents and streaming pipelines", (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let developer: string;
  let provider: ProviderClient;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, developer, projectId } = await server.prologue());
    // x/oauth2 clientcredentials: the client in HTTP Basic, audience among the form's fields.
    const token = await server.request('POST', '/oauth/dpc/token', {
      headers: {
        authorization: `Basic ${Buffer.from(`${encodeURIComponent(caller.clientId)}:${encodeURIComponent(caller.clientSecret)}`).toString('base64')}`,
      },
      body: new URLSearchParams({ grant_type: 'client_credentials', audience: 'https://api.matillion.com' }),
    });
    assert.equal(token.status, 200, token.text);
    assert.equal(token.body.token_type, 'Bearer');
    provider = new ProviderClient(server, caller.accountId, token.body.access_token);
  });
  after(() => server.close());

  test('matillion-streaming_agent: create, read, update, list, credentials, delete', async () => {
    // Create: the resource always sends agentType "streaming"; description is omitempty.
    const created = await provider.doRequest(
      'POST',
      '/agents',
      {
        name: 'tf-agent',
        description: 'Example streaming agent',
        deployment: 'fargate',
        cloudProvider: 'aws',
        agentType: 'streaming',
      },
      201,
    );
    const { agentId } = created;
    // Read after create, and on every refresh: the resource is dropped unless agentType reads "streaming".
    const read = await provider.doRequest('GET', `/agents/${agentId}`, undefined, 200);
    assert.equal(read.agentId, agentId);
    assert.equal(read.agentType, 'streaming');
    assert.equal(read.name, 'tf-agent');
    assert.equal(read.description, 'Example streaming agent');
    assert.equal(read.deployment, 'fargate');
    assert.equal(read.cloudProvider, 'aws');
    // Without a description the create omits it, and a read that lacks it unmarshals as "" (the provider's default).
    const bare = await provider.doRequest(
      'POST',
      '/agents',
      { name: 'tf-bare', deployment: 'aks', cloudProvider: 'azure', agentType: 'streaming' },
      201,
    );
    assert.equal((await provider.doRequest('GET', `/agents/${bare.agentId}`, undefined, 200)).description ?? '', '');

    // Update sends name and description only and expects 202.
    await provider.doRequest('PATCH', `/agents/${agentId}`, { name: 'tf-agent-2', description: 'renamed' }, 202);
    const updated = await provider.doRequest('GET', `/agents/${agentId}`, undefined, 200);
    assert.deepEqual(
      [updated.name, updated.description, updated.agentType, updated.deployment],
      ['tf-agent-2', 'renamed', 'streaming', 'fargate'],
    );

    // Import reads the list page by page.
    const listed = await provider.list('/agents');
    assert.ok(listed.some((agent) => agent.agentId === agentId && agent.agentType === 'streaming'));

    // The credentials data source: the same on every read until rotated; they work at the token endpoint.
    const credentials = await provider.doRequest('GET', `/agents/${agentId}/credentials`, undefined, 200);
    assert.equal(typeof credentials.clientId, 'string');
    assert.equal(typeof credentials.clientSecret, 'string');
    assert.deepEqual(await provider.doRequest('GET', `/agents/${agentId}/credentials`, undefined, 200), credentials);
    assert.ok(await server.token(credentials.clientId, credentials.clientSecret));

    // Delete expects 202 and sends no body.
    await provider.doRequest('DELETE', `/agents/${agentId}`, undefined, 202);
    await provider.doRequest('GET', `/agents/${agentId}`, undefined, 404);
    await provider.doRequest('DELETE', `/agents/${bare.agentId}`, undefined, 202);
  });

  test('agent credentials: admins only, every read audited, sealed at rest, rotation changes them, a read never does', async () => {
    const { agentId } = await provider.doRequest(
      'POST',
      '/agents',
      { name: 'sealed', deployment: 'gke', cloudProvider: 'gcp', agentType: 'streaming' },
      201,
    );
    const path = `/agents/${agentId}/credentials`;
    for (const token of [viewer, developer]) {
      expectProblem(await server.api('GET', path, { token }), 403);
    }
    const stranger = await server.newAccount('stranger');
    expectProblem(await server.api('GET', path, { token: stranger.token }), 404);

    const first = await server.api('GET', path, { token: caller.token });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('cache-control'), 'no-store');
    assert.deepEqual((await server.api('GET', path, { token: caller.token })).body, first.body);

    // Nowhere in the store in plain text.
    const row = await server.db.selectFrom('agents').selectAll().where('id', '=', agentId).executeTakeFirstOrThrow();
    assert.ok(row.sealedSecret && !row.sealedSecret.includes(first.body.clientSecret));
    assert.ok(!JSON.stringify(row).includes(first.body.clientSecret));

    // Each read is in the audit trail (who and which agent, never the secret).
    const events = await server.api('GET', '/events?size=100', { token: caller.token });
    const reads = events.body.results.filter(
      (event: { method: string; route: string; resourceIds: Record<string, string> }) =>
        event.method === 'GET' && event.route === '/dpc/v1/agents/:agentId/credentials' && event.resourceIds.agentId === agentId,
    );
    assert.equal(reads.length, 2);
    assert.ok(!JSON.stringify(events.body).includes(first.body.clientSecret));

    // Rotation (POST) issues new ones, which reads answer from then on; the old secret stops working.
    const rotated = await server.api('POST', path, { token: caller.token });
    assert.equal(rotated.status, 201, rotated.text);
    assert.notEqual(rotated.body.clientSecret, first.body.clientSecret);
    assert.deepEqual((await server.api('GET', path, { token: caller.token })).body, rotated.body);
    const old = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: first.body.clientId,
        client_secret: first.body.clientSecret,
      }),
    });
    assert.equal(old.status, 401);
  });

  test('matillion-streaming_pipeline: every source and target type is answered back exactly as written', async () => {
    const { agentId } = await provider.doRequest(
      'POST',
      '/agents',
      { name: 'pipelines', deployment: 'eks', cloudProvider: 'aws', agentType: 'streaming' },
      201,
    );
    const pairs: [keyof typeof sources, keyof typeof targets][] = [
      ['postgres', 's3'],
      ['mysql', 'snowflake'],
      ['sqlserver', 'snowflakeMinimal'],
      ['oracle', 'abs'],
      ['db2ibmi', 's3WithMapping'],
    ];
    const ids: string[] = [];
    for (const [source, target] of pairs) {
      // pipelineCreate: name, agentId, streamingSource, streamingTarget, advancedProperties (omitempty).
      const body = {
        name: `${source}-to-${target}`,
        agentId,
        streamingSource: sources[source],
        streamingTarget: targets[target],
        ...(source === 'postgres' && { advancedProperties: { 'snapshot.mode': 'initial' } }),
      };
      const created = await provider.doRequest('POST', `/projects/${projectId}/streaming-pipelines`, body, 201);
      assert.equal(typeof created.streamingPipelineId, 'string');
      const read = await provider.doRequest(
        'GET',
        `/projects/${projectId}/streaming-pipelines/${created.streamingPipelineId}`,
        undefined,
        200,
      );
      for (const answer of [created, read]) {
        assert.deepEqual(answer.streamingSource, body.streamingSource, `${source}: no drift`);
        assert.deepEqual(answer.streamingTarget, body.streamingTarget, `${target}: no drift`);
        assert.equal(answer.agentId, agentId);
        assert.equal(answer.name, body.name);
        assert.deepEqual(answer.advancedProperties, body.advancedProperties ?? {});
      }
      ids.push(created.streamingPipelineId);
    }

    // Replace (PUT, 200) another source and target in; the answer is the new definition.
    const replacement = {
      name: 'moved',
      agentId,
      streamingSource: sources.oracle,
      streamingTarget: targets.snowflake,
      advancedProperties: { 'max.batch.size': '2048' },
    };
    const replaced = await provider.doRequest('PUT', `/projects/${projectId}/streaming-pipelines/${ids[0]}`, replacement, 200);
    assert.equal(replaced.streamingPipelineId, ids[0]);
    assert.deepEqual(
      (await provider.doRequest('GET', `/projects/${projectId}/streaming-pipelines/${ids[0]}`, undefined, 200)).streamingTarget,
      targets.snowflake,
    );

    // Import lists page by page; delete answers 204.
    const listed = await provider.list(`/projects/${projectId}/streaming-pipelines`);
    assert.deepEqual(listed.map((p) => p.streamingPipelineId).sort(), [...ids].sort());
    const byId = new Map(listed.map((p) => [p.streamingPipelineId, p]));
    assert.deepEqual(byId.get(ids[2]).streamingTarget, targets.snowflakeMinimal);
    for (const id of ids) await provider.doRequest('DELETE', `/projects/${projectId}/streaming-pipelines/${id}`, undefined, 204);
  });

  test('start and stop through POST .../commands {command: START|STOP}', async () => {
    const { agentId } = await provider.doRequest(
      'POST',
      '/agents',
      { name: 'commands', deployment: 'aci', cloudProvider: 'azure', agentType: 'streaming' },
      201,
    );
    const created = await provider.doRequest(
      'POST',
      `/projects/${projectId}/streaming-pipelines`,
      { name: 'commanded', agentId, streamingSource: sources.mysql, streamingTarget: targets.s3 },
      201,
    );
    const commands = `/projects/${projectId}/streaming-pipelines/${created.streamingPipelineId}/commands`;
    const started = await provider.doRequest('POST', commands, { command: 'START' }, 202);
    assert.equal(started.status, 'STARTING');
    // Only a RUNNING pipeline stops: the agent has not reported yet.
    expectProblem(await server.api('POST', commands, { token: caller.token, body: { command: 'STOP' } }), 409);
    const bad = expectProblem(await server.api('POST', commands, { token: caller.token, body: { command: 'PAUSE' } }), 400);
    assert.ok(
      bad.violations?.some((v) => v.startsWith('body.command')),
      JSON.stringify(bad),
    );
  });

  test('bad input answers 400 naming the field of the chosen type; secrets only as references', async () => {
    const { agentId } = await provider.doRequest(
      'POST',
      '/agents',
      { name: 'refusals', deployment: 'gce', cloudProvider: 'gcp', agentType: 'streaming' },
      201,
    );
    const attempt = async (streamingSource: unknown, streamingTarget: unknown) =>
      expectProblem(
        await server.api('POST', `/projects/${projectId}/streaming-pipelines`, {
          token: caller.token,
          body: { name: 'refused', agentId, streamingSource, streamingTarget },
        }),
        400,
      ).violations ?? [];
    const { role: _role, ...noRole } = targets.snowflake;
    assert.deepEqual(await attempt(sources.postgres, noRole), ['body.streamingTarget.role: is required']);
    const { bucket: _bucket, ...noBucket } = targets.s3;
    assert.deepEqual(await attempt(sources.postgres, noBucket), ['body.streamingTarget.bucket: is required']);
    const { database: _database, ...connection } = sources.postgres.connection;
    assert.deepEqual(await attempt({ ...sources.postgres, connection }, targets.s3), [
      'body.streamingSource.connection.database: is required',
    ]);
    const [unknownType] = await attempt({ ...sources.postgres, type: 'mongodb' }, targets.s3);
    assert.match(unknownType, /^body\.streamingSource\.type: /);
    assert.deepEqual(await attempt(sources.postgres, { ...targets.snowflake, transformationType: 'merge' }), [
      'body.streamingTarget.transformationType: must be equal to one of the allowed values',
    ]);
    const leaky = structuredClone(targets.snowflake) as any;
    leaky.connection.authentication.privateKey = { secretName: 'sf', value: '-----BEGIN PRIVATE KEY-----' };
    const violations = await attempt(sources.postgres, leaky);
    assert.deepEqual(violations, [
      'body.streamingTarget.connection.authentication.privateKey.value: a secret reference holds only secretName, secretType, secretKey, secretLocation, key, never a value',
    ]);
    assert.ok(!JSON.stringify(violations).includes('BEGIN PRIVATE KEY'));
  });
});
