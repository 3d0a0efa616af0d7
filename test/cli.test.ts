import assert from 'node:assert/strict';
import { connect } from 'node:net';
import pg from 'pg';
import { after, before, test } from 'node:test';
import { describeEachStore, describeOnPostgres, scratchStore } from './helpers/harness.ts';
import { runDpc, spawnServe } from './helpers/processes.ts';

describeEachStore('the dpc command and the server process', (kind) => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    env = { DPC_DATA_DIR: scratch.settings.dataDir ?? '', DATABASE_URL: scratch.settings.databaseUrl ?? '', LOG_LEVEL: 'info' };
  });
  after(() => drop());

  test('--help explains every command', () => {
    const help = runDpc(['--help'], env);
    assert.equal(help.status, 0);
    for (const command of ['serve', 'migrate', 'accounts create', 'clients create', 'keys rotate'])
      assert.ok(help.stdout.includes(command), command);
  });

  test('migrate, accounts, clients and keys work on the store; misuse exits 2', () => {
    const migrated = runDpc(['migrate'], env);
    assert.equal(migrated.status, 0, migrated.stderr);
    assert.ok(Array.isArray(JSON.parse(migrated.stdout).migrated));
    const account = runDpc(['accounts', 'create', '--name', 'Acme'], env);
    assert.equal(account.status, 0, account.stderr);
    const created = JSON.parse(account.stdout);
    assert.deepEqual(Object.keys(created).sort(), ['accountId', 'clientId', 'clientSecret']);
    const client = runDpc(['clients', 'create', '--account', created.accountId, '--role', 'viewer', '--name', 'ci'], env);
    assert.equal(client.status, 0, client.stderr);
    assert.deepEqual(Object.keys(JSON.parse(client.stdout)).sort(), ['clientId', 'clientSecret']);
    assert.match(JSON.parse(runDpc(['keys', 'rotate'], env).stdout).kid, /^[0-9a-f-]{36}$/);
    assert.equal(runDpc(['clients', 'create', '--account', created.accountId, '--role', 'root'], env).status, 2);
    assert.equal(runDpc(['accounts', 'create'], env).status, 2);
    assert.equal(runDpc(['frobnicate'], env).status, 2);
    const unknownAccount = runDpc(['clients', 'create', '--account', 'nope', '--role', 'admin'], env);
    assert.equal(unknownAccount.status, 1);
    assert.match(unknownAccount.stderr, /account nope does not exist/);
  });

  test('serve: JSON request logs without credentials; SIGTERM finishes requests in flight', async () => {
    const { clientId, clientSecret } = JSON.parse(runDpc(['accounts', 'create', '--name', 'Served'], env).stdout);
    const server = await spawnServe(env);
    try {
      const tokenAnswer = await fetch(`${server.url}/oauth/dpc/token`, {
        method: 'POST',
        body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
      });
      const { access_token: token } = (await tokenAnswer.json()) as { access_token: string };
      assert.equal((await fetch(`${server.url}/dpc/v1/projects`, { headers: { authorization: `Bearer ${token}` } })).status, 200);

      // A request whose body is still arriving when SIGTERM comes must still be answered.
      const body = JSON.stringify({ name: 'in flight' });
      const socket = connect(new URL(server.url).port as unknown as number, '127.0.0.1');
      let response = '';
      socket.on('data', (chunk) => (response += chunk));
      const closed = new Promise((resolve) => socket.once('close', resolve));
      socket.write(
        `POST /dpc/v1/projects HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`,
      );
      await new Promise((r) => setTimeout(r, 300));
      server.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      socket.write(body.slice(5)); // no half-close: a client that ends its side gets no answer, by design of node:http
      for (let i = 0; i < 100 && !response.includes('\r\n\r\n'); i += 1) await new Promise((r) => setTimeout(r, 50));
      socket.end();
      await closed;
      assert.match(response, /^HTTP\/1\.1 201/);
      assert.equal(await server.exited, 0);

      const lines = server
        .logs()
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line));
      const requestLines = lines.filter((line) => line.msg === 'request completed');
      assert.ok(requestLines.length >= 3);
      for (const line of requestLines) {
        for (const field of ['reqId', 'method', 'url', 'status', 'durationMs']) assert.ok(field in line, field);
      }
      assert.ok(requestLines.some((line) => line.route === '/dpc/v1/projects' && line.status === 201));
      for (const secret of [token, clientSecret, 'Bearer']) assert.ok(!server.logs().includes(secret), 'no credential is logged');
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  test('two server processes on one store take concurrent writes without failing', async () => {
    const { clientId, clientSecret } = JSON.parse(runDpc(['accounts', 'create', '--name', 'Shared'], env).stdout);
    const servers = [await spawnServe(env), await spawnServe(env)];
    try {
      const tokenAnswer = await fetch(`${servers[0].url}/oauth/dpc/token`, {
        method: 'POST',
        body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
      });
      const { access_token: token } = (await tokenAnswer.json()) as { access_token: string };
      const call = (i: number, method: string, path: string, body: unknown, headers: Record<string, string> = {}) =>
        fetch(`${servers[i % 2].url}/dpc/v1${path}`, {
          method,
          headers: {
            authorization: `Bearer ${token}`,
            ...(body instanceof FormData ? {} : { 'content-type': 'application/json' }),
            ...headers,
          },
          body: body instanceof FormData ? body : JSON.stringify(body),
        });
      const { projectId } = (await (await call(0, 'POST', '/projects', { name: 'shared' })).json()) as { projectId: string };
      assert.equal((await call(1, 'POST', `/projects/${projectId}/environments`, { name: 'dev' })).status, 201);
      const upload = () => {
        const form = new FormData();
        for (let i = 0; i < 200; i += 1)
          form.append(`sql/f${i}.sql`, new Blob([`select ${i};\n`.repeat(100)], { type: 'text/plain' }), 'f.sql');
        return form;
      };
      const answers = await Promise.all([
        ...Array.from({ length: 20 }, (_, i) =>
          call(i, 'POST', `/projects/${projectId}/variables`, { name: `v${i}`, type: 'NUMBER', behaviour: 'SHARED', value: i }),
        ),
        ...Array.from({ length: 4 }, (_, i) =>
          call(i, 'POST', `/projects/${projectId}/artifacts`, upload(), { versionName: `v${i}`, environmentName: 'dev' }),
        ),
      ]);
      assert.deepEqual(
        answers.map((a) => a.status),
        [...Array(20).fill(201), ...Array(4).fill(200)],
      );
      const list = (await (await call(1, 'GET', `/projects/${projectId}/variables`, undefined)).json()) as { total: number };
      assert.equal(list.total, 20);
    } finally {
      for (const server of servers) server.child.kill('SIGKILL');
    }
  });
});

describeOnPostgres('the server process and PostgreSQL faults', () => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  before(async () => {
    const scratch = await scratchStore('postgres');
    drop = scratch.drop;
    env = { DPC_DATA_DIR: '', DATABASE_URL: scratch.settings.databaseUrl, LOG_LEVEL: 'info' };
  });
  after(() => drop());

  test('the server outlives PostgreSQL dropping its connections', async () => {
    const applicationName = `dpc-victim-${process.pid}`;
    const url = new URL(env.DATABASE_URL!);
    url.searchParams.set('application_name', applicationName);
    const victimEnv = { ...env, DATABASE_URL: url.toString() };
    const { clientId, clientSecret } = JSON.parse(runDpc(['accounts', 'create', '--name', 'Dropped'], victimEnv).stdout);
    const server = await spawnServe(victimEnv);
    try {
      const tokenAnswer = await fetch(`${server.url}/oauth/dpc/token`, {
        method: 'POST',
        body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
      });
      const { access_token: token } = (await tokenAnswer.json()) as { access_token: string };
      const list = () => fetch(`${server.url}/dpc/v1/projects`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal((await list()).status, 200);
      const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
      await admin.connect();
      try {
        const dropped = await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where application_name = $1', [
          applicationName,
        ]);
        assert.ok(dropped.rowCount! > 0);
      } finally {
        await admin.end();
      }
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(server.child.exitCode, null, 'still running');
      assert.equal((await list()).status, 200);
      assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});
