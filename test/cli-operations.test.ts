import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, scratchStore } from './helpers/harness.ts';
import { runDpc, spawnServe } from './helpers/processes.ts';

describeEachStore('dpc for operators', (kind) => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    env = {
      DPC_DATA_DIR: scratch.settings.dataDir ?? '',
      DATABASE_URL: scratch.settings.databaseUrl ?? '',
      LOG_LEVEL: 'info',
      DPC_REVOCATION_REFRESH_SECONDS: '1',
      DPC_ENCRYPTION_KEYS: Buffer.alloc(32, 7).toString('base64'),
    };
  });
  after(() => drop());

  test('each command has its own --help; --version prints the package version', () => {
    const revoke = runDpc(['clients', 'revoke', '--help'], env);
    assert.equal(revoke.status, 0);
    assert.match(revoke.stdout, /^Usage: dpc clients revoke CLIENT_ID/);
    assert.match(revoke.stdout, /DPC_REVOCATION_REFRESH_SECONDS/);
    assert.doesNotMatch(revoke.stdout, /accounts create/);
    assert.match(runDpc(['help', 'publish'], env).stdout, /--environment ENVIRONMENT/);
    assert.match(runDpc(['clients', '--help'], env).stdout, /dpc clients list[\s\S]*dpc clients revoke/);
    assert.match(runDpc(['accounts', 'list', '--help'], env).stdout, /--format json\|table/);
    assert.match(runDpc(['--version'], env).stdout, /^\d+\.\d+\.\d+\n$/);
  });

  test('exit codes say what failed; configuration errors are one line', () => {
    assert.equal(runDpc(['accounts', 'list', '--format', 'xml'], env).status, 2);
    assert.equal(runDpc(['clients', 'revoke'], env).status, 2);
    assert.equal(runDpc(['clients', 'revoke', 'no-such-client'], env).status, 1);
    for (const [name, value, message] of [
      ['PORT', '70000', /^dpc: PORT must be an integer from 0 to 65535, got "70000"\n$/],
      ['DATABASE_URL', 'mysql://u:hidden@h/db', /^dpc: DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL\n$/],
      ['LOG_LEVEL', 'loud', /^dpc: LOG_LEVEL must be one of .*, got "loud"\n$/],
      ['DPC_LINEAGE', 'off', /^dpc: DPC_LINEAGE must be one of true, false, got "off"\n$/],
      ['DPC_PROBLEM_TYPE_BASE', 'not a url', /^dpc: DPC_PROBLEM_TYPE_BASE must be a http:\/\/ or https:\/\/ URL\n$/],
    ] as const) {
      for (const command of [['config'], ['serve']]) {
        const run = runDpc(command, { ...env, [name]: value });
        assert.equal(run.status, 3, `${name} ${command}`);
        assert.match(run.stderr, message);
        assert.ok(!run.stderr.includes('hidden'));
      }
    }
  });

  test('config prints the effective configuration with secrets masked', () => {
    const shown = runDpc(['config'], {
      ...env,
      DATABASE_URL: 'postgres://dpc:topsecret@db.example:5432/dpc',
      DPC_METRICS_TOKEN: 'scrape',
    });
    assert.equal(shown.status, 0, shown.stderr);
    const config = JSON.parse(shown.stdout);
    assert.equal(config.databaseUrl, 'postgres://dpc:***@db.example:5432/dpc');
    assert.deepEqual(config.encryptionKeys, ['***']);
    assert.equal(config.metricsToken, '***');
    assert.equal(config.revocationRefreshSeconds, 1);
    for (const secret of ['topsecret', 'scrape', env.DPC_ENCRYPTION_KEYS!]) assert.ok(!shown.stdout.includes(secret));
  });

  test('accounts and clients are listed (JSON or a table) and a revoked client is refused by the running server', async () => {
    const account = JSON.parse(runDpc(['accounts', 'create', '--name', 'Listed'], env).stdout);
    const listed = JSON.parse(runDpc(['accounts', 'list'], env).stdout);
    assert.ok(listed.some((a: { accountId: string; name: string }) => a.accountId === account.accountId && a.name === 'Listed'));
    const table = runDpc(['accounts', 'list', '--format', 'table'], env).stdout.split('\n');
    assert.match(table[0], /^accountId\s+name\s+createdAt$/);
    assert.ok(table.some((line) => line.startsWith(account.accountId) && line.includes('Listed')));

    const viewer = JSON.parse(runDpc(['clients', 'create', '--account', account.accountId, '--role', 'viewer'], env).stdout);
    const server = await spawnServe(env);
    try {
      const token = async (clientId: string, clientSecret: string) =>
        fetch(`${server.url}/oauth/dpc/token`, {
          method: 'POST',
          body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
        });
      const { access_token: viewerToken } = (await (await token(viewer.clientId, viewer.clientSecret)).json()) as {
        access_token: string;
      };
      const projects = () => fetch(`${server.url}/dpc/v1/projects`, { headers: { authorization: `Bearer ${viewerToken}` } });
      assert.equal((await projects()).status, 200);

      const revoked = runDpc(['clients', 'revoke', viewer.clientId], env);
      assert.equal(revoked.status, 0, revoked.stderr);
      assert.equal(JSON.parse(revoked.stdout).clientId, viewer.clientId);
      const clients = JSON.parse(runDpc(['clients', 'list', '--account', account.accountId], env).stdout);
      assert.deepEqual(clients.map((c: { role: string; revokedAt: string | null }) => [c.role, c.revokedAt !== null]).sort(), [
        ['admin', false],
        ['viewer', true],
      ]);
      assert.ok(!JSON.stringify(clients).includes('scrypt'), 'no secret hash');
      assert.equal((await token(viewer.clientId, viewer.clientSecret)).status, 401);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      assert.equal((await projects()).status, 401);
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  test('api and publish talk to the server with the client of the environment, never printing it', async () => {
    const admin = JSON.parse(runDpc(['accounts', 'create', '--name', 'Publisher'], env).stdout);
    const server = await spawnServe(env);
    const folder = mkdtempSync(path.join(tmpdir(), 'dpc-publish-'));
    try {
      const clientEnv = { ...env, DPC_URL: server.url, DPC_CLIENT_ID: admin.clientId, DPC_CLIENT_SECRET: admin.clientSecret };
      const created = runDpc(['api', 'POST', '/v1/projects', '--data', '{"name":"published"}'], clientEnv);
      assert.equal(created.status, 0, created.stderr);
      const { projectId } = JSON.parse(created.stdout);
      assert.equal(
        runDpc(['api', 'POST', `/v1/projects/${projectId}/environments`, '--data', '{"name":"dev"}'], clientEnv).status,
        0,
      );
      const connector = runDpc(['api', 'POST', '/v1/custom-connectors', '--data', '{"name":"mine","endpoints":[]}'], clientEnv);
      assert.equal(connector.status, 0, connector.stderr);
      const customId = JSON.parse(connector.stdout).id;
      const missing = runDpc(['api', 'GET', `/v1/projects/${projectId}/environments/nope`], clientEnv);
      assert.equal(missing.status, 1);
      assert.equal(runDpc(['api', 'GET', '/v1/projects', '--data', 'not json'], clientEnv).status, 2);
      assert.equal(runDpc(['api', 'GET', '/v1/projects'], { ...clientEnv, DPC_CLIENT_SECRET: 'wrong' }).status, 4);
      assert.equal(runDpc(['api', 'GET', '/v1/projects'], { ...clientEnv, DPC_URL: 'http://127.0.0.1:1' }).status, 4);

      mkdirSync(path.join(folder, 'pipelines'), { recursive: true });
      mkdirSync(path.join(folder, '.git'));
      writeFileSync(path.join(folder, 'pipelines', 'load.orch.yaml'), 'type: "orchestration"\n');
      writeFileSync(path.join(folder, 'readme.md'), '# project\n');
      writeFileSync(path.join(folder, 'logo.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2]));
      writeFileSync(path.join(folder, '.git', 'HEAD'), 'ref: refs/heads/main\n');
      const published = runDpc(
        ['publish', folder, '--project', projectId, '--environment', 'dev', '--version', 'v1', '--branch', 'main'],
        clientEnv,
      );
      assert.equal(published.status, 0, published.stderr);
      assert.deepEqual(JSON.parse(published.stdout), { ignoredResources: [], versionName: 'v1' });
      assert.match(published.stderr, /skipped logo\.png/);
      assert.match(published.stderr, /uploaded \d+ of \d+ bytes/);
      for (const secret of [admin.clientSecret, 'Bearer'])
        assert.ok(!published.stdout.includes(secret) && !published.stderr.includes(secret));

      const details = runDpc(
        ['api', 'GET', `/v1/projects/${projectId}/artifacts/details?environmentName=dev&versionName=v1`],
        clientEnv,
      );
      const { assets } = JSON.parse(details.stdout) as { assets: string[] };
      assert.ok(assets.includes('pipelines/load.orch.yaml') && assets.includes('readme.md'));
      assert.ok(assets.includes(`connector-profile:custom-${customId}.json`));
      assert.ok(assets.includes('connector-profile:flex-github.json'));
      assert.ok(!assets.some((asset) => asset.startsWith('.git') || asset === 'logo.png'));
      assert.equal(
        runDpc(['publish', folder, '--project', projectId, '--environment', 'dev', '--version', 'v1'], clientEnv).status,
        1,
        'a taken version fails',
      );

      // --review: the review's findings on stderr; an error publishes nothing, a warning does not stop it.
      writeFileSync(
        path.join(folder, 'pipelines', 'load.orch.yaml'),
        [
          'type: "orchestration"',
          'pipeline:',
          '  components:',
          '    Start:',
          '      type: "start"',
          '      transitions:',
          '        unconditional: ["Say"]',
          '    Say:',
          '      type: "print-variables"',
          '      parameters:',
          '        prefixText: "${regoin}"',
          '    Forgotten:',
          '      type: "print-variables"',
          '',
        ].join('\n'),
      );
      const review = (version: string) =>
        runDpc(['publish', folder, '--project', projectId, '--environment', 'dev', '--version', version, '--review'], clientEnv);
      const refused = review('v2');
      assert.equal(refused.status, 1, refused.stderr);
      assert.match(refused.stderr, /^ERROR unknown-variable pipelines\/load\.orch\.yaml Say\.prefixText: /m);
      assert.match(refused.stderr, /^WARNING unreachable-component pipelines\/load\.orch\.yaml Forgotten: /m);
      assert.match(refused.stderr, /review: 1 error\(s\), 1 warning\(s\) in 1 pipeline file\(s\)/);
      assert.match(refused.stderr, /nothing was published/);
      const versions = runDpc(['api', 'GET', `/v1/projects/${projectId}/artifacts?environmentName=dev`], clientEnv);
      assert.ok(!versions.stdout.includes('"v2"'), 'v2 was not published');
      const text = readFileSync(path.join(folder, 'pipelines', 'load.orch.yaml'), 'utf8');
      writeFileSync(path.join(folder, 'pipelines', 'load.orch.yaml'), text.replace('${regoin}', 'hello'));
      const warned = review('v2');
      assert.equal(warned.status, 0, warned.stderr);
      assert.match(warned.stderr, /review: 0 error\(s\), 1 warning\(s\)/);
      assert.deepEqual(JSON.parse(warned.stdout), { ignoredResources: [], versionName: 'v2' });
    } finally {
      server.child.kill('SIGKILL');
      rmSync(folder, { recursive: true, force: true });
    }
  });

  test('a request the client abandons is logged as such', async () => {
    const admin = JSON.parse(runDpc(['accounts', 'create', '--name', 'Abandoner'], env).stdout);
    const server = await spawnServe(env);
    try {
      const answer = await fetch(`${server.url}/oauth/dpc/token`, {
        method: 'POST',
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_id: admin.clientId,
          client_secret: admin.clientSecret,
        }),
      });
      const { access_token: token } = (await answer.json()) as { access_token: string };
      const socket = connect(Number(new URL(server.url).port), '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.write(
        `POST /dpc/v1/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n` +
          'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"na',
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      socket.destroy();
      await new Promise((resolve) => setTimeout(resolve, 300));
      const abandoned = server
        .logs()
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line))
        .find((line) => line.msg === 'request abandoned by the client');
      assert.ok(abandoned, server.logs());
      assert.equal(abandoned.route, '/dpc/v1/projects');
      assert.ok(typeof abandoned.reqId === 'string');
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});
