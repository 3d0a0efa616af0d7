import assert from 'node:assert/strict';
import { generateKeyPairSync, webcrypto } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { compactDecrypt } from 'jose';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { x509 } from '../../src/agent/x509.ts';
import { loadOrCreateIdentity, type AgentIdentity } from '../../src/agent/identity.ts';
import { cancelAgentWork, enqueueAgentWork } from '../../src/areas/agents/work.ts';

const agentBody = { name: 'eu-agent', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' };

describeEachStore('agents and the agent protocol', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let developer: string;
  let identity: AgentIdentity;
  const stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-test-'));
  before(async () => {
    server = await TestServer.start(kind, {
      agentWorkLeaseSeconds: 1,
      secretWriteTimeoutSeconds: 2,
      agentConnectedWindowSeconds: 5,
    });
    caller = await server.newAccount();
    viewer = await server.tokenFor(caller.accountId, 'viewer');
    developer = await server.tokenFor(caller.accountId, 'developer');
    identity = await loadOrCreateIdentity(stateDir, 'test-agent');
  });
  let restartedServer: TestServer | undefined;
  after(async () => {
    await restartedServer?.server.close();
    await server.close();
    rmSync(stateDir, { recursive: true, force: true });
  });

  const api = (method: string, apiPath: string, body?: unknown, token = caller.token) =>
    server.api(method, apiPath, { token, body });
  const agentCall = (token: string, method: string, apiPath: string, body?: unknown) =>
    server.request(method, `/dpc/agent/v1${apiPath}`, { token, body });

  async function newAgent(overrides: Record<string, unknown> = {}, owner = caller) {
    const created = await api(
      'POST',
      '/agents',
      { ...agentBody, name: `agent-${Math.random().toString(36).slice(2)}`, ...overrides },
      owner.token,
    );
    assert.equal(created.status, 201, created.text);
    return created.body.agentId as string;
  }

  /** An agent with credentials, signed in, its certificate registered and a first heartbeat sent. */
  async function connectedAgent(owner = caller) {
    const agentId = await newAgent({}, owner);
    const credentials = await api('POST', `/agents/${agentId}/credentials`, undefined, owner.token);
    const token = await server.token(credentials.body.clientId, credentials.body.clientSecret);
    assert.equal((await agentCall(token, 'PUT', '/certificate', { certificate: identity.certificatePem })).status, 200);
    assert.equal((await agentCall(token, 'POST', '/heartbeat', {})).status, 200);
    return { agentId, token };
  }

  test('create (201 with Location), read, list with filters, update, delete; placement and names checked', async () => {
    const created = await api('POST', '/agents', { ...agentBody, description: 'ours' });
    assert.equal(created.status, 201, created.text);
    const { agentId } = created.body;
    assert.equal(created.headers.get('location'), `/dpc/v1/agents/${agentId}`);
    const read = await api('GET', `/agents/${agentId}`);
    assert.deepEqual(
      { ...read.body, createdAt: undefined },
      {
        agentId,
        agentStatus: 'PENDING',
        agentType: 'CUSTOMER_HOSTED',
        cloudProvider: 'aws',
        connected: false,
        deployment: 'fargate',
        description: 'ours',
        name: 'eu-agent',
        createdAt: undefined,
      },
    );
    expectProblem(await api('POST', '/agents', agentBody), 409, 'conflict');
    const misplaced = expectProblem(await api('POST', '/agents', { ...agentBody, name: 'x', deployment: 'aks' }), 422);
    assert.deepEqual(misplaced.violations, ['body.deployment: must be one of fargate, eks on aws']);
    expectProblem(await api('POST', '/agents', { ...agentBody, name: 'y', agentType: 'ROBOT' }), 400);
    const other = await newAgent({ name: 'gcp-runner', agentType: 'PLATFORM_HOSTED', cloudProvider: 'gcp', deployment: 'gke' });

    // Runs are priced by who runs the agent: a PLATFORM_HOSTED agent stays one, and no other becomes one.
    for (const [id, agentType] of [
      [other, 'CUSTOMER_HOSTED'],
      [agentId, 'PLATFORM_HOSTED'],
    ]) {
      const relabelled = expectProblem(await api('PATCH', `/agents/${id}`, { agentType }), 409, 'conflict');
      assert.match(relabelled.violations![0], /^body\.agentType: /);
    }
    assert.equal((await api('PATCH', `/agents/${agentId}`, { agentType: 'streaming' })).status, 202);
    assert.equal((await api('PATCH', `/agents/${agentId}`, { agentType: 'CUSTOMER_HOSTED' })).status, 202);

    const byType = await api('GET', '/agents?type=PLATFORM_HOSTED');
    assert.deepEqual(
      byType.body.results.map((a: { agentId: string }) => a.agentId),
      [other],
    );
    const byName = await api('GET', '/agents?name=EU-');
    assert.ok(byName.body.results.every((a: { name: string }) => a.name.toLowerCase().includes('eu-')));
    assert.ok(byName.body.results.some((a: { agentId: string }) => a.agentId === agentId));
    assert.equal((await api('GET', '/agents?name=%25')).body.total, 0, 'a % in the filter is a literal');
    const paged = await api('GET', '/agents?page=0&size=1');
    assert.equal(paged.body.results.length, 1);
    assert.ok(paged.body.total >= 2);
    expectProblem(await api('GET', '/agents?status=SLEEPING'), 400);

    const paused = await api('PATCH', `/agents/${agentId}`, { pausedUntil: '2999-01-01T00:00:00Z', description: null });
    assert.equal(paused.status, 202, paused.text);
    assert.equal(paused.body.agentStatus, 'PAUSED');
    assert.equal(paused.body.description, undefined);
    assert.deepEqual(
      (await api('GET', '/agents?status=PAUSED')).body.results.map((a: { agentId: string }) => a.agentId),
      [agentId],
    );
    assert.ok(!(await api('GET', '/agents?status=PENDING')).body.results.some((a: { agentId: string }) => a.agentId === agentId));
    expectProblem(await api('PATCH', `/agents/${agentId}`, { cloudProvider: 'azure' }), 422);
    assert.equal((await api('PATCH', `/agents/${agentId}`, { pausedUntil: null })).body.agentStatus, 'PENDING');

    const deleted = await api('DELETE', `/agents/${agentId}`);
    assert.equal(deleted.status, 202);
    // No body: not a JSON `null` (attack finding 10).
    assert.equal(deleted.text, '');
    assert.equal(deleted.headers.get('content-type'), null);
    assert.ok([null, '0'].includes(deleted.headers.get('content-length')), String(deleted.headers.get('content-length')));
    expectProblem(await api('GET', `/agents/${agentId}`), 404);
    expectProblem(await api('DELETE', `/agents/${agentId}`), 404);
    expectProblem(await api('GET', '/agents/not-a-uuid'), 400);
  });

  test('only admins manage agents; viewers read; another account sees none of them', async () => {
    const agentId = await newAgent();
    assert.equal((await api('GET', `/agents/${agentId}`, undefined, viewer)).status, 200);
    assert.equal((await api('GET', '/agents', undefined, viewer)).status, 200);
    for (const token of [viewer, developer]) {
      expectProblem(await api('POST', '/agents', { ...agentBody, name: 'nope' }, token), 403);
      expectProblem(await api('PATCH', `/agents/${agentId}`, { name: 'nope' }, token), 403);
      expectProblem(await api('DELETE', `/agents/${agentId}`, undefined, token), 403);
      expectProblem(await api('POST', `/agents/${agentId}/credentials`, undefined, token), 403);
    }
    const stranger = await server.newAccount('stranger');
    expectProblem(await api('GET', `/agents/${agentId}`, undefined, stranger.token), 404);
    expectProblem(await api('POST', `/agents/${agentId}/credentials`, undefined, stranger.token), 404);
    expectProblem(await api('DELETE', `/agents/${agentId}`, undefined, stranger.token), 404);
    assert.equal((await api('GET', '/agents', undefined, stranger.token)).body.total, 0);
  });

  test('agent tokens reach only /dpc/agent/v1 and account tokens never do; new credentials revoke the old', async () => {
    const agentId = await newAgent();
    const first = (await api('POST', `/agents/${agentId}/credentials`)).body;
    assert.equal(first.clientId.length, 36);
    const stored = await server.db.selectFrom('agents').select('secretHash').where('id', '=', agentId).executeTakeFirstOrThrow();
    assert.ok(stored.secretHash?.startsWith('scrypt$') && !stored.secretHash.includes(first.clientSecret));
    const token = await server.token(first.clientId, first.clientSecret);
    expectProblem(await api('GET', '/agents', undefined, token), 401);
    expectProblem(await api('GET', '/projects', undefined, token), 401);
    expectProblem(await agentCall(caller.token, 'POST', '/heartbeat', {}), 401);
    expectProblem(await agentCall('', 'POST', '/heartbeat', {}), 401);
    assert.equal((await agentCall(token, 'POST', '/heartbeat', {})).status, 200);
    assert.equal((await api('GET', `/agents/${agentId}`)).body.connected, true);

    const second = (await api('POST', `/agents/${agentId}/credentials`)).body;
    expectProblem(await agentCall(token, 'POST', '/heartbeat', {}), 401);
    const refused = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: first.clientId,
        client_secret: first.clientSecret,
      }),
    });
    assert.equal(refused.status, 401);
    const renewed = await server.token(second.clientId, second.clientSecret);
    assert.equal((await agentCall(renewed, 'POST', '/heartbeat', {})).status, 200);
  });

  test('a certificate must be PEM X.509 with an RSA key of 2048 bits or more', async () => {
    const { token } = await connectedAgent();
    expectProblem(await agentCall(token, 'PUT', '/certificate', { certificate: 'not a certificate' }), 400);
    // An EC certificate is refused: secrets are encrypted with RSA-OAEP.
    const algorithm = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
    const keys = (await webcrypto.subtle.generateKey(algorithm, true, ['sign', 'verify'])) as CryptoKeyPair;
    const ec = (
      await x509.X509CertificateGenerator.createSelfSigned({
        serialNumber: '01',
        name: 'CN=ec',
        keys,
        signingAlgorithm: algorithm,
      })
    ).toString('pem');
    const refused = expectProblem(await agentCall(token, 'PUT', '/certificate', { certificate: ec }), 400);
    assert.match(refused.detail, /RSA public key/);
    const answer = await agentCall(token, 'PUT', '/certificate', { certificate: identity.certificatePem });
    assert.equal(answer.status, 200);
    assert.match(answer.body.fingerprint256, /^[0-9A-F:]+$/);
  });

  test('work is delivered to one poll, leased, redelivered when the lease lapses, and finished exactly once', async () => {
    const { agentId, token } = await connectedAgent();
    const workId = await server.db
      .transaction()
      .execute((trx) => enqueueAgentWork(trx, { accountId: caller.accountId, agentId, kind: 'write-secret', payload: { n: 1 } }));
    const first = await agentCall(token, 'GET', '/work?waitSeconds=1');
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(
      { ...first.body, leaseExpiresAt: undefined },
      { workId, kind: 'write-secret', payload: { n: 1 }, delivery: 1, leaseExpiresAt: undefined, leaseSeconds: 1 },
    );
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=0')).status, 204, 'leased: not delivered twice');
    // The lease (1 s here) lapses without a heartbeat naming the work: it is delivered again.
    const again = await agentCall(token, 'GET', '/work?waitSeconds=3');
    assert.equal(again.status, 200);
    assert.equal(again.body.delivery, 2);
    assert.equal(
      (await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'progress', body: { done: 1 } })).status,
      200,
    );
    const done = await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'done', body: { ok: true } });
    assert.deepEqual(done.body, { workId, state: 'done' });
    expectProblem(
      await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'done', body: {} }),
      409,
      'work-already-finished',
    );
    expectProblem(
      await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'failed', body: {} }),
      409,
      'work-already-finished',
    );
    const row = await server.db.selectFrom('agentWork').selectAll().where('id', '=', workId).executeTakeFirstOrThrow();
    assert.equal(row.payload, null);
    assert.deepEqual(JSON.parse(row.result!), { ok: true }, 'the first final report is kept');
    // Another agent cannot report on it.
    const other = await connectedAgent();
    expectProblem(await agentCall(other.token, 'POST', `/work/${workId}/reports`, { type: 'done' }), 404);
  });

  test('reports naming their delivery and sequence are taken once: a repeat answers as recorded; an earlier delivery is 409 (issue 36)', async () => {
    const { agentId, token } = await connectedAgent();
    const workId = await server.db
      .transaction()
      .execute((trx) => enqueueAgentWork(trx, { accountId: caller.accountId, agentId, kind: 'write-secret', payload: { n: 2 } }));
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=1')).body.delivery, 1);
    // The lease (1 s) lapses: delivered again.
    const again = await agentCall(token, 'GET', '/work?waitSeconds=3');
    assert.equal(again.body.delivery, 2);
    const report = (body: Record<string, unknown>) => agentCall(token, 'POST', `/work/${workId}/reports`, body);
    const sequenceOf = async () =>
      Number(
        (await server.db.selectFrom('agentWork').select('reportSequence').where('id', '=', workId).executeTakeFirstOrThrow())
          .reportSequence,
      );

    expectProblem(await report({ type: 'progress', body: {}, delivery: 1, sequence: 1 }), 409, 'work-redelivered');
    // A delivery that never was is not called "redelivered" (attack finding 10).
    const unknown = expectProblem(
      await report({ type: 'progress', body: {}, delivery: 7, sequence: 1 }),
      409,
      'work-delivery-unknown',
    );
    assert.match(unknown.detail, /delivery 7 does not exist/);
    // The heartbeat names the stale delivery as no longer the agent's to run, and renews only the current one.
    const held = [
      { workId, delivery: 1 },
      { workId, delivery: 2 },
    ];
    const beat = await agentCall(token, 'POST', '/heartbeat', { heldWork: held });
    assert.equal(beat.status, 200, beat.text);
    assert.deepEqual(beat.body.endedWork, [{ workId, delivery: 1, reason: 'redelivered' }]);
    assert.deepEqual(beat.body.cancelledWorkIds, []);
    expectProblem(await report({ type: 'done', body: {}, delivery: 1, sequence: 2 }), 409, 'work-redelivered');
    assert.equal(await sequenceOf(), 0);
    for (let i = 0; i < 2; i += 1) {
      const progress = await report({ type: 'progress', body: { done: 1 }, delivery: 2, sequence: 1 });
      assert.deepEqual([progress.status, progress.body], [200, { workId, state: 'delivered' }]);
    }
    assert.equal(await sequenceOf(), 1);
    // The final report, and the same again (its first answer lost): both answered as recorded, not 409.
    for (let i = 0; i < 2; i += 1) {
      const done = await report({ type: 'done', body: { attempt: i }, delivery: 2, sequence: 2 });
      assert.deepEqual([done.status, done.body], [200, { workId, state: 'done' }], done.text);
    }
    const row = await server.db.selectFrom('agentWork').selectAll().where('id', '=', workId).executeTakeFirstOrThrow();
    assert.deepEqual(JSON.parse(row.result!), { attempt: 0 }, 'the repeat is not applied');
    // Finished: each held delivery is no longer the agent's to run.
    const finished = await agentCall(token, 'POST', '/heartbeat', { heldWork: held });
    assert.deepEqual(finished.body.endedWork, [
      { workId, delivery: 1, reason: 'finished' },
      { workId, delivery: 2, reason: 'finished' },
    ]);
    // A new report on finished work is still refused.
    expectProblem(await report({ type: 'failed', body: {}, delivery: 2, sequence: 3 }), 409, 'work-already-finished');
    for (const bad of [{ sequence: 0 }, { delivery: 0 }, { sequence: 1.5 }]) {
      const problem = expectProblem(await report({ type: 'progress', ...bad }), 400);
      assert.match(problem.violations!.join(), new RegExp(`body.${Object.keys(bad)[0]}`));
    }
  });

  test("an agent deleted while its long poll waits: the poll ends as a deleted agent's request does (401), not 500", async () => {
    const { agentId, token } = await connectedAgent();
    const polling = agentCall(token, 'GET', '/work?waitSeconds=5');
    await new Promise((r) => setTimeout(r, 400));
    assert.equal((await api('DELETE', `/agents/${agentId}`)).status, 202);
    expectProblem(await polling, 401);
    expectProblem(await agentCall(token, 'POST', '/heartbeat', {}), 401);
  });

  test('a report on work of a kind the server has no handler for is refused loudly, and nothing of it is kept', async () => {
    const { agentId, token } = await connectedAgent();
    const workId = await server.db
      .transaction()
      .execute((trx) =>
        enqueueAgentWork(trx, { accountId: caller.accountId, agentId, kind: 'from-another-version', payload: 1 }),
      );
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=1')).body.workId, workId);
    expectProblem(await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'done', body: { ok: true } }), 500);
    const row = await server.db.selectFrom('agentWork').selectAll().where('id', '=', workId).executeTakeFirstOrThrow();
    assert.deepEqual([row.state, row.result], ['delivered', null], 'the report is not recorded');
  });

  test('a long poll waits for work enqueued meanwhile; a paused agent gets none; cancellation reaches the agent', async () => {
    const { agentId, token } = await connectedAgent();
    const enqueue = (payload: unknown) =>
      server.db
        .transaction()
        .execute((trx) => enqueueAgentWork(trx, { accountId: caller.accountId, agentId, kind: 'test-wait', payload }));
    const polling = agentCall(token, 'GET', '/work?waitSeconds=5');
    await new Promise((r) => setTimeout(r, 400));
    const workId = await enqueue('late');
    const answer = await polling;
    assert.equal(answer.status, 200);
    assert.equal(answer.body.workId, workId);

    // Delivered work that is cancelled: the agent learns it on its heartbeat, and a report is then refused.
    assert.equal(await server.db.transaction().execute((trx) => cancelAgentWork(trx, workId)), 'cancel-requested');
    const beat = await agentCall(token, 'POST', '/heartbeat', { heldWorkIds: [workId] });
    assert.deepEqual(beat.body.cancelledWorkIds, [workId]);
    expectProblem(await agentCall(token, 'POST', `/work/${workId}/reports`, { type: 'progress' }), 409, 'work-cancelled');
    // Queued work that is cancelled is never delivered.
    const queued = await enqueue('never');
    assert.equal(await server.db.transaction().execute((trx) => cancelAgentWork(trx, queued)), 'cancelled');
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=0')).status, 204);

    await api('PATCH', `/agents/${agentId}`, { pausedUntil: '2999-01-01T00:00:00Z' });
    await enqueue('held back');
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=1')).status, 204);
    await api('PATCH', `/agents/${agentId}`, { pausedUntil: null });
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=1')).status, 200);
  });

  test('at most 4 long polls per agent wait at once on a server; more answer 429 with Retry-After', async () => {
    const { token } = await connectedAgent();
    const other = await connectedAgent();
    const waiting = Array.from({ length: 4 }, () => agentCall(token, 'GET', '/work?waitSeconds=2'));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const refused = await agentCall(token, 'GET', '/work?waitSeconds=2');
    expectProblem(refused, 429, 'too-many-polls');
    assert.equal(refused.headers.get('retry-after'), '1');
    assert.equal((await agentCall(other.token, 'GET', '/work?waitSeconds=0')).status, 204, 'other agents are not limited');
    assert.deepEqual(
      (await Promise.all(waiting)).map((answer) => answer.status),
      [204, 204, 204, 204],
    );
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=0')).status, 204, 'a slot frees when a poll answers');
  });

  test('E15 encrypts for the agent certificate: only its private key decrypts; the confirmation answers', async () => {
    const { agentId, token } = await connectedAgent();
    const secret = { name: 'warehouse', key: 'login', type: 'PASSWORD', value: 'p4ss-unique-e15' };
    const writing = api('POST', `/secrets/${agentId}/secret-value`, { secret }, developer);
    const work = await agentCall(token, 'GET', '/work?waitSeconds=3');
    assert.equal(work.body.kind, 'write-secret');
    const { jwe, name, key, overwrite } = work.body.payload;
    assert.deepEqual({ name, key, overwrite }, { name: 'warehouse', key: 'login', overwrite: false });
    assert.ok(!JSON.stringify(work.body).includes(secret.value));
    // Confirmed at once: the server waits 2 s at most here.
    await agentCall(token, 'POST', `/work/${work.body.workId}/reports`, {
      type: 'done',
      body: { resolverRef: 'MATILLION_CUSTOMER_VAULT:warehouse:login', vaultSecretName: 'warehouse' },
    });
    const { plaintext, protectedHeader } = await compactDecrypt(jwe, identity.privateKey);
    assert.equal(protectedHeader.alg, 'RSA-OAEP-256');
    assert.equal(protectedHeader.enc, 'A256GCM');
    assert.deepEqual(JSON.parse(new TextDecoder().decode(plaintext)), { value: secret.value });
    const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    await assert.rejects(compactDecrypt(jwe, stranger));
    const answer = await writing;
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body, { resolver_ref: 'MATILLION_CUSTOMER_VAULT:warehouse:login', vaultSecretName: 'warehouse' });
    expectProblem(await api('POST', `/secrets/${agentId}/secret-value`, { secret }, viewer), 403);
  });

  test('E15 answers 502 when the done report lacks its fields or names another vault secret', async () => {
    const { agentId, token } = await connectedAgent();
    const secret = { name: 'warehouse', key: 'login', type: 'PASSWORD', value: 'v' };
    for (const body of [
      {},
      null,
      { resolverRef: 'MATILLION_CUSTOMER_VAULT:warehouse:login' },
      { resolverRef: 'MATILLION_CUSTOMER_VAULT:other:login', vaultSecretName: 'other' },
      { resolverRef: 7, vaultSecretName: 'warehouse' },
    ]) {
      const writing = api('POST', `/secrets/${agentId}/secret-value`, { secret }, developer);
      const work = await agentCall(token, 'GET', '/work?waitSeconds=3');
      await agentCall(token, 'POST', `/work/${work.body.workId}/reports`, { type: 'done', body });
      const answer = await writing;
      const problem = expectProblem(answer, 502, 'secret-write-bad-confirmation');
      assert.match(problem.detail, /MAY have been written/);
      assert.ok(!answer.text.includes('undefined'), answer.text);
    }
  });

  test('E15 answers 409 agent-deleted at once when the agent is deleted while the write waits', async () => {
    const secret = { name: 'n', key: 'k', type: 'PASSWORD', value: 'v' };
    for (const take of [false, true]) {
      const { agentId, token } = await connectedAgent();
      const writing = api('POST', `/secrets/${agentId}/secret-value`, { secret }, developer);
      if (take) assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=3')).status, 200);
      // Let the waiting request see the work (queued, or taken) before the deletion.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const started = Date.now();
      assert.equal((await api('DELETE', `/agents/${agentId}`)).status, 202);
      const problem = expectProblem(await writing, 409, 'agent-deleted');
      assert.ok(Date.now() - started < 1000, 'answered at once, not after the timeout');
      assert.match(problem.detail, take ? /MAY have been written/ : /NOT written/);
    }
  });

  test('E15 problems: unknown agent 404, no certificate 409, not connected 503, no confirmation 504 (written or not)', async () => {
    const secret = { name: 'n', key: 'k', type: 'PASSWORD', value: 'v' };
    expectProblem(await api('POST', '/secrets/0f3c1e0a-8a53-4b8e-9d53-7f3f7c5d0a11/secret-value', { secret }), 404);
    expectProblem(await api('POST', `/secrets/${await newAgent()}/secret-value`, { secret }), 409, 'agent-has-no-certificate');
    const silent = await connectedAgent();
    await agentCall(silent.token, 'POST', '/disconnect');
    expectProblem(await api('POST', `/secrets/${silent.agentId}/secret-value`, { secret }), 503, 'agent-not-connected');
    expectProblem(await api('POST', `/secrets/${silent.agentId}/secret-value`, { secret: { ...secret, value: {} } }), 400);
    // Names every object answers to would address the prototype in an agent's vault (issue 36).
    for (const name of ['__proto__', 'constructor', 'toString', 'valueOf']) {
      const byName = expectProblem(
        await api('POST', `/secrets/${silent.agentId}/secret-value`, { secret: { ...secret, name } }),
        400,
      );
      assert.deepEqual(
        byName.violations?.map((v: string) => v.split(':')[0]),
        ['body.secret.name'],
      );
      const byKey = expectProblem(
        await api('POST', `/secrets/${silent.agentId}/secret-value`, { secret: { ...secret, key: name } }),
        400,
      );
      assert.deepEqual(
        byKey.violations?.map((v: string) => v.split(':')[0]),
        ['body.secret.key'],
      );
    }

    // Connected but not polling: the work is withdrawn before delivery, so it was certainly not written.
    await agentCall(silent.token, 'POST', '/heartbeat', {});
    const withdrawn = expectProblem(
      await api('POST', `/secrets/${silent.agentId}/secret-value`, { secret }),
      504,
      'secret-not-written',
    );
    assert.match(withdrawn.detail, /NOT written/);
    assert.equal((await agentCall(silent.token, 'GET', '/work?waitSeconds=0')).status, 204, 'withdrawn work is never delivered');

    // Taken but never confirmed: it may have been written; the agent is told to stop.
    const writing = api('POST', `/secrets/${silent.agentId}/secret-value`, { secret });
    const taken = await agentCall(silent.token, 'GET', '/work?waitSeconds=3');
    assert.equal(taken.status, 200);
    expectProblem(await writing, 504, 'secret-write-unconfirmed');
    const beat = await agentCall(silent.token, 'POST', '/heartbeat', { heldWorkIds: [taken.body.workId] });
    assert.deepEqual(beat.body.cancelledWorkIds, [taken.body.workId]);
    const row = await server.db
      .selectFrom('agentWork')
      .select('payload')
      .where('id', '=', taken.body.workId)
      .executeTakeFirstOrThrow();
    assert.equal(row.payload, null, 'the ciphertext is dropped on cancellation');
    // Its lease lapses with the cancellation pending: never delivered again; it ends cancelled, payload cleared.
    await new Promise((resolve) => setTimeout(resolve, 1200));
    assert.equal((await agentCall(silent.token, 'GET', '/work?waitSeconds=0')).status, 204, 'not delivered again');
    const closed = await server.db
      .selectFrom('agentWork')
      .select(['state', 'payload'])
      .where('id', '=', taken.body.workId)
      .executeTakeFirstOrThrow();
    assert.deepEqual(closed, { state: 'cancelled', payload: null });
  });

  test('with two server instances on one store, each piece of work goes to exactly one poll', async () => {
    const beside = await TestServer.startBeside(server);
    try {
      const { agentId, token } = await connectedAgent();
      const ids = new Set<string>();
      await server.db.transaction().execute(async (trx) => {
        for (let i = 0; i < 12; i += 1) {
          ids.add(await enqueueAgentWork(trx, { accountId: caller.accountId, agentId, kind: 'test-race', payload: i }));
        }
      });
      // Two rounds of 8 racing polls: 4 per server, the most one agent may have waiting on each.
      const polls = [];
      for (let round = 0; round < 2; round += 1) {
        polls.push(
          ...(await Promise.all(
            Array.from({ length: 8 }, (_, i) =>
              (i % 2 ? beside : server).request('GET', '/dpc/agent/v1/work?waitSeconds=0', { token }),
            ),
          )),
        );
      }
      // First deliveries only: on a loaded machine a lease (1 s here) can lapse between the rounds, and the
      // work is then rightly delivered again (delivery 2).
      const delivered = polls.filter((p) => p.status === 200 && p.body.delivery === 1).map((p) => p.body.workId as string);
      assert.equal(delivered.length, 12);
      assert.deepEqual(new Set(delivered), ids);
    } finally {
      await beside.close();
    }
  });

  // Last: it restarts the suite's server.
  test('work survives a server restart: delivered work whose lease lapsed goes to the next poll, and is finished once', async () => {
    const { agentId, token } = await connectedAgent();
    const workId = await server.db
      .transaction()
      .execute((trx) => enqueueAgentWork(trx, { accountId: caller.accountId, agentId, kind: 'write-secret', payload: 'kept' }));
    assert.equal((await agentCall(token, 'GET', '/work?waitSeconds=1')).body.workId, workId);
    await server.server.close();
    const restarted = await TestServer.startBeside(server);
    restartedServer = restarted;

    const call = (method: string, apiPath: string, body?: unknown) =>
      restarted.request(method, `/dpc/agent/v1${apiPath}`, { token, body });
    const again = await call('GET', '/work?waitSeconds=3');
    assert.equal(again.status, 200, again.text);
    assert.deepEqual([again.body.workId, again.body.payload, again.body.delivery], [workId, 'kept', 2]);
    assert.equal((await call('POST', `/work/${workId}/reports`, { type: 'done' })).status, 200);
    expectProblem(await call('POST', `/work/${workId}/reports`, { type: 'done' }), 409, 'work-already-finished');
  });
});
