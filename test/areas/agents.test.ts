import assert from 'node:assert/strict';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { compactDecrypt } from 'jose';
import { sql } from 'kysely';
import { describeEachStore, describeOnPostgres, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { until } from '../helpers/until.ts';
import { loadOrCreateIdentity } from '../../src/agent/identity.ts';
import { enqueueAgentWork } from '../../src/areas/agents/work.ts';

const AGENT = { name: 'eu-prod', description: 'Production', agentType: 'HYBRID', cloudProvider: 'aws', deployment: 'fargate' };

describeEachStore('agents', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let logs = '';
  const stateDirs: string[] = [];

  before(async () => {
    server = await TestServer.start(
      kind,
      { agentConnectedSeconds: 2, agentSecretTimeoutMs: 8000, agentPollWaitSeconds: 1 },
      {
        level: 'trace',
        stream: { write: (line: string) => void (logs += line) },
      },
    );
    caller = await server.newAccount();
  });
  after(async () => {
    await server.close();
    for (const dir of stateDirs) rmSync(dir, { recursive: true, force: true });
  });

  const newAgent = async (body: Record<string, unknown> = {}) => {
    const answer = await server.api('POST', '/agents', {
      token: caller.token,
      body: { ...AGENT, name: `agent-${randomBytes(4).toString('hex')}`, ...body },
    });
    assert.equal(answer.status, 201, answer.text);
    return answer.body.agentId as string;
  };
  const credentialsOf = async (agentId: string) => {
    const answer = await server.api('POST', `/agents/${agentId}/credentials`, { token: caller.token });
    assert.equal(answer.status, 200, answer.text);
    return answer.body as { clientId: string; clientSecret: string };
  };
  const agentCall = (token: string, method: string, urlPath: string, body: unknown = {}) =>
    server.request(method, `/dpc/agent/v1${urlPath}`, { token, body });

  test('create, read, list with filters, pause and resume, delete; writes are for admins', async () => {
    const created = await server.api('POST', '/agents', { token: caller.token, body: AGENT });
    assert.equal(created.status, 201);
    const { agentId } = created.body;
    assert.equal(created.headers.get('location'), `/dpc/v1/agents/${agentId}`);
    const read = await server.api('GET', `/agents/${agentId}`, { token: caller.token });
    assert.deepEqual(
      { ...read.body, createdAt: undefined },
      {
        agentId,
        agentStatus: 'PENDING',
        agentType: 'HYBRID',
        cloudProvider: 'aws',
        connected: false,
        deployment: 'fargate',
        description: 'Production',
        name: 'eu-prod',
        hasCertificate: false,
        hasCredentials: false,
        createdAt: undefined,
      },
    );
    expectProblem(await server.api('POST', '/agents', { token: caller.token, body: AGENT }), 409);
    const badPair = await server.api('POST', '/agents', {
      token: caller.token,
      body: { ...AGENT, name: 'x', deployment: 'aks' },
    });
    expectProblem(badPair, 400);
    assert.match(badPair.body.violations[0], /^deployment:/);
    expectProblem(
      await server.api('POST', '/agents', { token: caller.token, body: { ...AGENT, name: 'y', agentType: 'ROBOT' } }),
      400,
    );
    const developer = await server.tokenFor(caller.accountId, 'developer');
    expectProblem(await server.api('POST', '/agents', { token: developer, body: { ...AGENT, name: 'z' } }), 403);
    expectProblem(await server.api('PATCH', `/agents/${agentId}`, { token: developer, body: { agentStatus: 'STOPPED' } }), 403);
    assert.equal((await server.api('GET', '/agents', { token: developer })).status, 200);

    const until = '2099-01-01T00:00:00.000Z';
    const paused = await server.api('PATCH', `/agents/${agentId}`, {
      token: caller.token,
      body: { agentStatus: 'PAUSED', pausedUntil: until },
    });
    assert.equal(paused.body.agentStatus, 'PAUSED');
    assert.equal(paused.body.pausedUntil, until);
    const listed = await server.api('GET', '/agents?agentStatus=PAUSED&name=EU-P', { token: caller.token });
    assert.deepEqual(
      listed.body.results.map((a: { agentId: string }) => a.agentId),
      [agentId],
    );
    assert.equal(listed.body.total, 1);
    assert.equal((await server.api('GET', '/agents?agentType=FULL_SAAS', { token: caller.token })).body.total, 0);
    // A pause whose time has passed is over.
    await server.api('PATCH', `/agents/${agentId}`, {
      token: caller.token,
      body: { agentStatus: 'PAUSED', pausedUntil: '2000-01-01T00:00:00Z' },
    });
    assert.equal((await server.api('GET', `/agents/${agentId}`, { token: caller.token })).body.agentStatus, 'PENDING');
    // Resuming an agent never in contact leaves it PENDING; stopping stops it.
    assert.equal(
      (await server.api('PATCH', `/agents/${agentId}`, { token: caller.token, body: { agentStatus: 'STOPPED' } })).body
        .agentStatus,
      'STOPPED',
    );
    assert.equal(
      (await server.api('PATCH', `/agents/${agentId}`, { token: caller.token, body: { agentStatus: 'RUNNING' } })).body
        .agentStatus,
      'PENDING',
    );
    expectProblem(await server.api('PATCH', `/agents/${agentId}`, { token: caller.token, body: { pausedUntil: until } }), 400);

    assert.equal((await server.api('DELETE', `/agents/${agentId}`, { token: caller.token })).status, 204);
    expectProblem(await server.api('GET', `/agents/${agentId}`, { token: caller.token }), 404);
  });

  test('agent tokens reach only the agent protocol, account tokens never reach it; rotation ends the old credentials', async () => {
    const agentId = await newAgent();
    const first = await credentialsOf(agentId);
    const agentToken = await server.token(first.clientId, first.clientSecret);
    expectProblem(await server.api('GET', '/projects', { token: agentToken }), 403);
    expectProblem(await agentCall(caller.token, 'POST', '/heartbeat'), 403);
    expectProblem(await agentCall('not-a-token', 'POST', '/heartbeat'), 401);
    const beat = await agentCall(agentToken, 'POST', '/heartbeat');
    assert.equal(beat.status, 200, beat.text);
    assert.equal(beat.body.agentStatus, 'RUNNING');
    const seen = await server.api('GET', `/agents/${agentId}`, { token: caller.token });
    assert.equal(seen.body.connected, true);
    assert.equal(seen.body.agentStatus, 'RUNNING');

    const second = await credentialsOf(agentId);
    assert.notEqual(second.clientId, first.clientId);
    expectProblem(await agentCall(agentToken, 'POST', '/heartbeat'), 401);
    const refused = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: first.clientId,
        client_secret: first.clientSecret,
      }),
    });
    assert.equal(refused.status, 401);
    assert.equal((await agentCall(await server.token(second.clientId, second.clientSecret), 'POST', '/heartbeat')).status, 200);
    // Out of contact past the window: not connected.
    await until(
      'disconnect',
      async () => !(await server.api('GET', `/agents/${agentId}`, { token: caller.token })).body.connected,
      5000,
    );
  });

  test('work is delivered to one poll, again after its lease lapses, and its final report is taken once', async () => {
    const agentId = await newAgent();
    const credentials = await credentialsOf(agentId);
    const token = await server.token(credentials.clientId, credentials.clientSecret);
    await agentCall(token, 'POST', '/heartbeat');
    const workId = await enqueueAgentWork(server.db, {
      accountId: caller.accountId,
      agentId,
      kind: 'test-kind',
      payload: { n: 1 },
    });
    const polls = await Promise.all([1, 2, 3].map(() => agentCall(token, 'POST', '/work/poll', { waitSeconds: 1 })));
    const delivered = polls.flatMap((poll) => poll.body.work);
    assert.equal(delivered.length, 1);
    assert.deepEqual(delivered[0], { workId, kind: 'test-kind', payload: { n: 1 }, deliveries: 1 });

    // The lease lapses when no heartbeat names the work: it is delivered again.
    await server.db.updateTable('agentWork').set({ leaseUntil: '2000-01-01T00:00:00.000Z' }).where('id', '=', workId).execute();
    const again = await agentCall(token, 'POST', '/work/poll', { waitSeconds: 0 });
    assert.equal(again.body.work[0].deliveries, 2);

    assert.equal(
      (await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'progress', body: { step: 1 } })).status,
      200,
    );
    assert.equal((await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'done', body: {} })).status, 200);
    expectProblem(await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'done', body: {} }), 409);
    expectProblem(await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'failed', body: {} }), 409);
    const row = await server.db.selectFrom('agentWork').selectAll().where('id', '=', workId).executeTakeFirstOrThrow();
    assert.equal(row.state, 'DONE');
    assert.equal(row.payload, null);

    // Another agent of the account cannot report on it.
    const other = await credentialsOf(await newAgent());
    expectProblem(
      await agentCall(await server.token(other.clientId, other.clientSecret), 'POST', `/work/${workId}/reports`, {
        type: 'done',
      }),
      404,
    );
  });

  test("a secret sent through E15 is encrypted so that only the agent's private key opens it", async () => {
    const agentId = await newAgent();
    const credentials = await credentialsOf(agentId);
    const token = await server.token(credentials.clientId, credentials.clientSecret);
    const stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    stateDirs.push(stateDir);
    const identity = await loadOrCreateIdentity(stateDir, 'test agent');
    expectProblem(
      await server.api('POST', `/secrets/${agentId}/secret-value`, {
        token: caller.token,
        body: { secret: { name: 'n', key: 'k', type: 'PASSWORD', value: { password: 'p' } } },
      }),
      409,
    );
    assert.equal((await agentCall(token, 'PUT', '/certificate', { certificate: identity.certificate })).status, 200);
    expectProblem(await agentCall(token, 'PUT', '/certificate', { certificate: 'not a certificate' }), 400);

    const plaintext = `plain-${randomBytes(8).toString('hex')}`;
    const writing = server.api('POST', `/secrets/${agentId}/secret-value`, {
      token: caller.token,
      body: { secret: { name: 'db', key: 'password', type: 'PASSWORD', value: { password: plaintext } } },
    });
    const poll = await until('the secret work', async () => {
      const answer = await agentCall(token, 'POST', '/work/poll', { waitSeconds: 1 });
      return answer.body.work.length > 0 && answer.body;
    });
    // Confirmed first, within the server's wait; the ciphertext is examined afterwards.
    await agentCall(token, 'POST', `/work/${poll.work[0].workId}/reports`, {
      type: 'done',
      body: { vaultSecretName: 'db', resolverRef: 'MATILLION_CUSTOMER_VAULT:db:password' },
    });
    const written = await writing;
    assert.equal(written.status, 200, written.text);
    const { jwe } = poll.work[0].payload;
    assert.ok(!jwe.includes(plaintext) && !Buffer.from(jwe.split('.')[3] ?? '', 'base64url').includes(plaintext));
    const { plaintext: opened } = await compactDecrypt(jwe, identity.privateKey);
    assert.equal(JSON.parse(new TextDecoder().decode(opened)).value.password, plaintext);
    const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    await assert.rejects(compactDecrypt(jwe, stranger));
    assert.deepEqual(written.body, { resolver_ref: 'MATILLION_CUSTOMER_VAULT:db:password', vaultSecretName: 'db' });
  });

  test('the whole path with the reference agent process: connected, secret in its vault, never in the store or logs; stopped, E15 fails clearly', async () => {
    const agentId = await newAgent();
    const credentials = await credentialsOf(agentId);
    const stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    stateDirs.push(stateDir);
    const agent = spawnAgent(server.url, credentials, stateDir);
    try {
      await until(
        'connected',
        async () => {
          const read = (await server.api('GET', `/agents/${agentId}`, { token: caller.token })).body;
          return read.connected && read.hasCertificate;
        },
        60_000,
      ); // the agent's first start makes its RSA key, which takes a while on a loaded machine
      assert.equal(statSync(path.join(stateDir, 'agent-key.pem')).mode & 0o777, 0o600);

      const plaintext = `s3cret-${randomBytes(12).toString('hex')}`;
      const body = { secret: { name: 'warehouse', key: 'password', type: 'PASSWORD', value: { password: plaintext } } };
      const written = await server.api('POST', `/secrets/${agentId}/secret-value`, { token: caller.token, body });
      assert.equal(written.status, 200, `${written.text}\n${agent.logs()}`);
      assert.deepEqual(written.body, {
        resolver_ref: 'MATILLION_CUSTOMER_VAULT:warehouse:password',
        vaultSecretName: 'warehouse',
      });
      const vaultFile = path.join(stateDir, 'vault.json');
      assert.equal(statSync(vaultFile).mode & 0o777, 0o600);
      assert.equal(JSON.parse(readFileSync(vaultFile, 'utf8')).secrets.warehouse.password.value.password, plaintext);

      // The same name again without overwrite is refused by the vault; with overwrite it is replaced.
      expectProblem(await server.api('POST', `/secrets/${agentId}/secret-value`, { token: caller.token, body }), 409);
      const replaced = await server.api('POST', `/secrets/${agentId}/secret-value?overwrite=true`, { token: caller.token, body });
      assert.equal(replaced.status, 200);

      // Nowhere on the server's side: not in any row of any table, not in any log line.
      assert.ok(!logs.includes(plaintext), 'the plaintext is in the server log');
      assert.ok(!(await storeHolds(server, kind, plaintext)), 'the plaintext is in the store');
      assert.ok(
        await storeHolds(server, kind, 'MATILLION_CUSTOMER_VAULT:warehouse:password'),
        'the search finds what the store holds',
      );
      const works = await server.db.selectFrom('agentWork').select(['payload', 'state']).where('agentId', '=', agentId).execute();
      assert.ok(
        works.every((work) => work.payload === null),
        'a ciphertext outlived its delivery',
      );

      // A second account neither sees the agent nor writes through it.
      const stranger = await server.newAccount('stranger');
      expectProblem(await server.api('GET', `/agents/${agentId}`, { token: stranger.token }), 404);
      expectProblem(await server.api('POST', `/secrets/${agentId}/secret-value`, { token: stranger.token, body }), 404);
      assert.equal((await server.api('GET', '/agents', { token: stranger.token })).body.total, 0);
    } finally {
      await agent.stop();
    }
    await until(
      'disconnected',
      async () => !(await server.api('GET', `/agents/${agentId}`, { token: caller.token })).body.connected,
      6000,
    );
    const refused = await server.api('POST', `/secrets/${agentId}/secret-value`, {
      token: caller.token,
      body: { secret: { name: 'later', key: 'k', type: 'PASSWORD', value: { password: 'x' } } },
    });
    expectProblem(refused, 503);
    assert.match(refused.body.detail, /not connected/);
  });

  test('an agent that takes no secret in time: 504 saying it was not written', async () => {
    const agentId = await newAgent();
    const credentials = await credentialsOf(agentId);
    const token = await server.token(credentials.clientId, credentials.clientSecret);
    const stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    stateDirs.push(stateDir);
    await agentCall(token, 'PUT', '/certificate', { certificate: (await loadOrCreateIdentity(stateDir, 'quiet')).certificate });
    const timedOut = await server.api('POST', `/secrets/${agentId}/secret-value`, {
      token: caller.token,
      body: { secret: { name: 'quiet', key: 'k', type: 'PASSWORD', value: { password: 'x' } } },
    });
    expectProblem(timedOut, 504);
    assert.match(timedOut.body.detail, /NOT written/);
    // The agent polls later: the cancelled secret is not handed out.
    assert.deepEqual((await agentCall(token, 'POST', '/work/poll', { waitSeconds: 0 })).body.work, []);
  });
});

/** Whether any text column of any table of the scratch store holds `text`. */
async function storeHolds(server: TestServer, kind: string, text: string): Promise<boolean> {
  if (kind === 'sqlite') {
    const file = path.join(server.config.dataDir, 'platform.db');
    const bytes = [file, `${file}-wal`].flatMap((f) => {
      try {
        return [readFileSync(f)];
      } catch {
        return [];
      }
    });
    return bytes.some((b) => b.includes(text));
  }
  const tables = await sql<{
    tableName: string;
  }>`select table_name from information_schema.tables where table_schema = 'public'`.execute(server.db);
  for (const { tableName } of tables.rows) {
    const found = await sql`select 1 from ${sql.table(tableName)} t where t::text like ${`%${text}%`} limit 1`.execute(server.db);
    if (found.rows.length > 0) return true;
  }
  return false;
}

describeOnPostgres('agent work across server processes', () => {
  let first: TestServer;
  let second: TestServer;
  before(async () => {
    first = await TestServer.start('postgres', { agentPollWaitSeconds: 1 });
    second = await TestServer.startBeside(first);
  });
  after(async () => {
    await second.close();
    await first.close();
  });

  test('each piece of work goes to one poll, whichever process the polls reach; it outlives a process', async () => {
    const caller = await first.newAccount();
    const agentId = (await first.api('POST', '/agents', { token: caller.token, body: AGENT })).body.agentId;
    const credentials = (await first.api('POST', `/agents/${agentId}/credentials`, { token: caller.token })).body;
    const token = await first.token(credentials.clientId, credentials.clientSecret);
    const works = await Promise.all(
      Array.from({ length: 40 }, (_, n) =>
        enqueueAgentWork(first.db, { accountId: caller.accountId, agentId, kind: 'test-kind', payload: { n } }),
      ),
    );
    const delivered: string[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async (_, poller) => {
        const server = poller % 2 === 0 ? first : second;
        for (;;) {
          const answer = await server.request('POST', '/dpc/agent/v1/work/poll', { token, body: { max: 3, waitSeconds: 0 } });
          assert.equal(answer.status, 200, answer.text);
          if (answer.body.work.length === 0) return;
          delivered.push(...answer.body.work.map((work: { workId: string }) => work.workId));
        }
      }),
    );
    assert.equal(delivered.length, works.length, 'a piece of work was delivered twice or not at all');
    assert.deepEqual([...delivered].sort(), [...works].sort());

    // Work added now waits in the store: a process started later hands it out.
    const later = await enqueueAgentWork(first.db, { accountId: caller.accountId, agentId, kind: 'test-kind', payload: {} });
    await second.close();
    second = await TestServer.startBeside(first);
    const poll = await second.request('POST', '/dpc/agent/v1/work/poll', { token, body: { waitSeconds: 0 } });
    assert.deepEqual(
      poll.body.work.map((work: { workId: string }) => work.workId),
      [later],
    );
  });
});
