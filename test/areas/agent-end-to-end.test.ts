import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore, scratchStore } from '../helpers/harness.ts';
import { runDpc, spawnAgent, spawnServe } from '../helpers/processes.ts';

/**
 * The whole path with real processes on loopback: `dpc serve`, and the reference agent `dpc agent run`.
 * An agent is created, given credentials and started; it connects; a secret written through E15 lands in
 * its vault (and nowhere else); the agent stops; it is no longer connected and E15 fails clearly.
 */
describeEachStore('the reference agent, end to end', (kind) => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  let serve: Awaited<ReturnType<typeof spawnServe>>;
  let stateDir: string;
  let databaseUrl: string | undefined;
  let dataDir: string;
  const accounts: { accountId: string; token: string }[] = [];

  async function call(method: string, apiPath: string, token: string, body?: unknown) {
    const answer = await fetch(`${serve.url}/dpc/v1${apiPath}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await answer.text();
    return { status: answer.status, body: text ? JSON.parse(text) : undefined, text };
  }

  async function tokenOf(clientId: string, clientSecret: string) {
    const answer = await fetch(`${serve.url}/oauth/dpc/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
    });
    assert.equal(answer.status, 200);
    return ((await answer.json()) as { access_token: string }).access_token;
  }

  async function until(what: string, check: () => Promise<boolean>, timeoutMs = 15_000) {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (await check()) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.fail(`timed out waiting until ${what}`);
  }

  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    databaseUrl = scratch.settings.databaseUrl;
    dataDir = scratch.settings.dataDir!;
    env = {
      DPC_DATA_DIR: dataDir,
      DATABASE_URL: databaseUrl ?? '',
      LOG_LEVEL: 'trace',
      DPC_AGENT_CONNECTED_WINDOW_SECONDS: '6',
      DPC_SECRET_WRITE_TIMEOUT_SECONDS: '10',
      DPC_ENCRYPTION_KEYS: Buffer.alloc(32, 9).toString('base64'),
    };
    for (const name of ['first', 'second']) {
      const created = runDpc(['accounts', 'create', '--name', name], env);
      assert.equal(created.status, 0, created.stderr);
      accounts.push(JSON.parse(created.stdout));
    }
    serve = await spawnServe(env);
    for (const account of accounts) {
      const { clientId, clientSecret } = account as unknown as { clientId: string; clientSecret: string };
      account.token = await tokenOf(clientId, clientSecret);
    }
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
  });
  after(async () => {
    serve?.child.kill('SIGTERM');
    await serve?.exited;
    rmSync(stateDir, { recursive: true, force: true });
    await drop();
  });

  test('created, credentials issued, started, connected; a secret lands in its vault only; stopped, E15 then fails', async () => {
    const [first, second] = accounts;
    const created = await call('POST', '/agents', first.token, {
      name: 'reference',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'fargate',
    });
    assert.equal(created.status, 201, created.text);
    const { agentId } = created.body;
    const credentials = await call('POST', `/agents/${agentId}/credentials`, first.token);
    assert.equal(credentials.status, 201, credentials.text);
    assert.equal((await call('GET', `/agents/${agentId}`, first.token)).body.connected, false);

    const plaintext = `plain-${randomBytes(12).toString('hex')}`;
    const agent = await spawnAgent({ url: serve.url, ...credentials.body, stateDir });
    try {
      await until('the agent is connected', async () => (await call('GET', `/agents/${agentId}`, first.token)).body.connected);
      const shown = (await call('GET', `/agents/${agentId}`, first.token)).body;
      assert.equal(shown.agentStatus, 'RUNNING');
      assert.match(shown.certificateFingerprint, /^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
      for (const file of ['agent-key.pem', 'agent-certificate.pem']) {
        assert.equal(statSync(path.join(stateDir, file)).mode & 0o777, 0o600, file);
      }

      // Another account neither sees the agent nor writes through it.
      assert.equal((await call('GET', `/agents/${agentId}`, second.token)).status, 404);
      assert.equal((await call('GET', '/agents', second.token)).body.total, 0);
      const secret = {
        name: 'warehouse',
        key: 'login',
        type: 'PASSWORD',
        value: { clientId: 'loader', clientSecret: plaintext },
      };
      const foreign = await call('POST', `/secrets/${agentId}/secret-value`, second.token, { secret });
      assert.equal(foreign.status, 404, foreign.text);

      const written = await call('POST', `/secrets/${agentId}/secret-value`, first.token, { secret });
      assert.equal(written.status, 200, written.text);
      assert.deepEqual(written.body, { resolver_ref: 'MATILLION_CUSTOMER_VAULT:warehouse:login', vaultSecretName: 'warehouse' });
      const vaultFile = path.join(stateDir, 'vault.json');
      assert.equal(statSync(vaultFile).mode & 0o777, 0o600);
      assert.deepEqual(JSON.parse(readFileSync(vaultFile, 'utf8')).warehouse.login, secret.value);

      // Writing it again without overwrite is refused by the agent; with overwrite it is replaced.
      const again = await call('POST', `/secrets/${agentId}/secret-value`, first.token, { secret });
      assert.equal(again.status, 409, again.text);
      assert.match(again.body.type, /secret-exists$/);
      const replaced = await call('POST', `/secrets/${agentId}/secret-value?overwrite=true`, first.token, {
        secret: { ...secret, value: { clientId: 'loader', clientSecret: `${plaintext}-2` } },
      });
      assert.equal(replaced.status, 200, replaced.text);

      // The plaintext is nowhere on the server's side: the store, its files, the server's log.
      await until('the work rows are written', async () => true);
      assert.ok(!serve.logs().includes(plaintext), 'not in the server log');
      assert.ok(serve.logs().length > 0);
      assert.ok(!agent.logs().includes(plaintext), 'not in the agent log');
      if (databaseUrl) {
        const client = new pg.Client({ connectionString: databaseUrl });
        await client.connect();
        try {
          const tables = await client.query(
            "select table_name from information_schema.tables where table_schema = current_schema() and table_type = 'BASE TABLE'",
          );
          assert.ok(tables.rows.length > 5);
          for (const { table_name: table } of tables.rows) {
            const rows = await client.query(`select t::text as row from "${table}" t`);
            assert.ok(!rows.rows.some((r) => r.row.includes(plaintext)), `not in table ${table}`);
          }
          const work = await client.query("select payload from agent_work where kind = 'write-secret'");
          assert.ok(
            work.rows.length >= 3 && work.rows.every((r) => r.payload === null),
            'the ciphertext is removed once acknowledged',
          );
        } finally {
          await client.end();
        }
      }
      for (const file of readdirSync(dataDir, { recursive: true, withFileTypes: true })) {
        if (!file.isFile()) continue;
        assert.ok(!readFileSync(path.join(file.parentPath, file.name)).includes(plaintext), `not in ${file.name}`);
      }

      // A streaming pipeline on this agent starts only once the secrets it refers to are in the vault.
      const projectId = (await call('POST', '/projects', first.token, { name: 'streams' })).body.projectId;
      const secretsOf = {
        password: { secretName: 'orders-db', secretKey: 'password' },
        accountKey: { secretName: 'warehouse', secretKey: 'login' },
      };
      const pipeline = await call('POST', `/projects/${projectId}/streaming-pipelines`, first.token, {
        name: 'orders',
        agentId,
        streamingSource: {
          type: 'postgres',
          connection: { host: 'db', port: 5432, database: 'orders', username: 'u', password: secretsOf.password },
          tables: [{ schema: 'public', table: 'orders' }],
        },
        streamingTarget: { type: 'abs', accountName: 'lake', container: 'cdc', accountKey: secretsOf.accountKey },
      });
      assert.equal(pipeline.status, 201, pipeline.text);
      const pipelinePath = `/projects/${projectId}/streaming-pipelines/${pipeline.body.streamingPipelineId}`;
      const pipelineStatus = async () => (await call('GET', `${pipelinePath}/status`, first.token)).body;
      assert.equal((await call('POST', `${pipelinePath}/start`, first.token)).status, 202);
      await until('the start failed', async () => (await pipelineStatus()).status === 'FAILED');
      assert.match((await pipelineStatus()).message, /orders-db .*not in the vault/);
      const stored = await call('POST', `/secrets/${agentId}/secret-value`, first.token, {
        secret: { name: 'orders-db', key: 'password', type: 'PASSWORD', value: `${plaintext}-db` },
      });
      assert.equal(stored.status, 200, stored.text);
      // With the source's password in the vault the start gets past it, to the target's account key, which is
      // not there (pipelines that run and move data: test/agent/streaming-cdc.test.ts, streaming-abs.test.ts).
      assert.equal((await call('POST', `${pipelinePath}/start`, first.token)).status, 202);
      await until('the start failed again', async () => (await pipelineStatus()).status === 'FAILED');
      assert.equal((await pipelineStatus()).message, 'secret warehouse holds no account key');
    } finally {
      agent.child.kill('SIGTERM');
      assert.equal(await agent.exited, 0, agent.logs());
    }
    assert.ok(!serve.logs().includes(plaintext), 'not in the server log');
    const stopped = (await call('GET', `/agents/${agentId}`, first.token)).body;
    assert.equal(stopped.connected, false);
    assert.equal(stopped.agentStatus, 'STOPPED');
    const refused = await call('POST', `/secrets/${agentId}/secret-value`, first.token, {
      secret: { name: 'other', key: 'k', type: 'PASSWORD', value: 'x' },
    });
    assert.equal(refused.status, 503, refused.text);
    assert.match(refused.body.type, /agent-not-connected$/);
  });
});
