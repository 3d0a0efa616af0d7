import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

/** A webhook receiver on a loopback port; `answer` decides each request's status (or null: never answer). */
class Receiver {
  readonly requests: { path: string; headers: http.IncomingHttpHeaders; body: string; at: number }[] = [];
  answer: (path: string) => number | null = () => 204;
  private readonly server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      const path = request.url ?? '/';
      this.requests.push({ path, headers: request.headers, body, at: Date.now() });
      const status = this.answer(path);
      if (status !== null) response.writeHead(status).end();
    });
  });

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Everything the store holds, as text: the SQLite files' bytes, or every PostgreSQL table's rows. */
async function storeText(server: TestServer): Promise<string> {
  if (!server.config.databaseUrl) {
    const dir = server.config.dataDir;
    return readdirSync(dir)
      .filter((name) => name.startsWith('platform.db'))
      .map((name) => readFileSync(path.join(dir, name)).toString('latin1'))
      .join('\n');
  }
  const tables = await sql<{ name: string }>`
    select quote_ident(schemaname) || '.' || quote_ident(tablename) as name from pg_tables
    where schemaname not in ('pg_catalog', 'information_schema')`.execute(server.db);
  const texts: string[] = [];
  for (const { name } of tables.rows) {
    const rows = await sql<{ row: string }>`select t::text as row from ${sql.raw(name)} t`.execute(server.db);
    texts.push(...rows.rows.map((r) => r.row));
  }
  return texts.join('\n');
}

/** The fingerprint an unkeyed hash would give (attack 3 A12): what must not be found in the store. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const members = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${members.map(([name, member]) => `${JSON.stringify(name)}:${canonicalJson(member)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const SETTINGS = {
  outboundAllowedRanges: ['127.0.0.1'],
  outboundTimeoutMs: 8_000,
  eventsPollMs: 200,
  webhookRetrySeconds: [1],
  webhookDisableAfter: 1,
};

describeEachStore('webhooks (attack 3)', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let receiver: Receiver;
  let base: string;
  before(async () => {
    server = await TestServer.start(kind, SETTINGS);
    caller = await server.newAccount();
    receiver = new Receiver();
    base = await receiver.start();
  });
  after(async () => {
    await receiver.close();
    await server.close();
  });

  const api = (method: string, url: string, body?: unknown, headers: Record<string, string> = {}, token = caller.token) =>
    server.api(method, url, { token, body, headers });

  test('A12: answers showing a secret and secret values are not kept in plain text for Idempotency-Key retries', async () => {
    const created = await api(
      'POST',
      '/webhooks',
      { url: `${base}/hook`, eventTypes: ['nothing.none'] },
      { 'idempotency-key': 'wh-1' },
    );
    assert.equal(created.status, 201, created.text);
    const webhookSecret = created.body.signingSecret as string;
    const webhookId = created.body.webhookId as string;
    const rotated = await api('POST', `/webhooks/${webhookId}/signing-secret`, undefined, { 'idempotency-key': 'rot-1' });
    assert.equal(rotated.status, 200, rotated.text);

    const agent = await api('POST', '/agents', {
      name: 'a12',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'fargate',
    });
    assert.equal(agent.status, 201, agent.text);
    const agentId = agent.body.agentId as string;
    const credentials = await api('POST', `/agents/${agentId}/credentials`, undefined, { 'idempotency-key': 'cred-1' });
    assert.equal(credentials.status, 201, credentials.text);

    const value = `hunter-${randomUUID().slice(0, 8)}`;
    const secretBody = { secret: { name: 'db', key: 'password', type: 'PASSWORD', value } };
    const secretUrl = `/secrets/${agentId}/secret-value?overwrite=false`;
    const written = await api('POST', secretUrl, secretBody, { 'idempotency-key': 'sv-1' });
    assert.ok(written.status < 500, written.text);
    const plainFingerprint = createHash('sha256')
      .update(`POST /dpc/v1${secretUrl}\n`)
      .update(canonicalJson(secretBody))
      .digest('hex');

    const stored = await storeText(server);
    for (const [what, secret] of [
      ['the webhook signing secret', webhookSecret],
      ['the rotated signing secret', rotated.body.signingSecret as string],
      ['the agent client secret', credentials.body.clientSecret as string],
      ['the secret value', value],
      ['an unkeyed hash of the secret value write', plainFingerprint],
    ]) {
      assert.ok(!stored.includes(secret), `the store holds ${what}`);
    }

    // A retry is still answered the same, secret included.
    const again = await api(
      'POST',
      '/webhooks',
      { url: `${base}/hook`, eventTypes: ['nothing.none'] },
      { 'idempotency-key': 'wh-1' },
    );
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(again.body.signingSecret, webhookSecret);
    const rotatedAgain = await api('POST', `/webhooks/${webhookId}/signing-secret`, undefined, { 'idempotency-key': 'rot-1' });
    assert.equal(rotatedAgain.body.signingSecret, rotated.body.signingSecret);
    assert.equal(rotatedAgain.headers.get('cache-control'), 'no-store');
    const credentialsAgain = await api('POST', `/agents/${agentId}/credentials`, undefined, { 'idempotency-key': 'cred-1' });
    assert.equal(credentialsAgain.headers.get('idempotent-replayed'), 'true');
    assert.equal(credentialsAgain.body.clientSecret, credentials.body.clientSecret);
    const writtenAgain = await api('POST', secretUrl, secretBody, { 'idempotency-key': 'sv-1' });
    assert.equal(writtenAgain.status, written.status);
    assert.equal(writtenAgain.headers.get('idempotent-replayed'), 'true');
    // Another value with the same key is another request.
    const other = await api(
      'POST',
      secretUrl,
      { secret: { ...secretBody.secret, value: 'other' } },
      { 'idempotency-key': 'sv-1' },
    );
    expectProblem(other, 422);
    await api('DELETE', `/webhooks/${webhookId}`);
  });

  test("A18: a receiver that never answers delays only its own webhook: another account's is sent at once", async () => {
    const other = await server.prologue();
    const slow = (n: number) =>
      api('POST', '/webhooks', { url: `${base}/slow/${n}`, eventTypes: ['environments.created'] }, {}, other.caller.token);
    receiver.answer = (path) => (path.startsWith('/slow') ? null : 204);
    for (const n of [1, 2, 3]) assert.equal((await slow(n)).status, 201);
    for (const name of ['one', 'two']) {
      const made = await api('POST', `/projects/${other.projectId}/environments`, { name }, {}, other.caller.token);
      assert.equal(made.status, 201, made.text);
    }
    await until('the slow receivers to be tried', () => receiver.requests.filter((r) => r.path.startsWith('/slow')).length >= 3);

    const projectId = await server.newProject(caller);
    const hook = await api('POST', '/webhooks', { url: `${base}/fast`, eventTypes: ['environments.created'] });
    assert.equal(hook.status, 201);
    const started = Date.now();
    assert.equal((await api('POST', `/projects/${projectId}/environments`, { name: 'healthy' })).status, 201);
    const got = await until('the healthy delivery', () => receiver.requests.find((r) => r.path === '/fast'), 6_000);
    assert.ok(got.at - started < 2_000, `the healthy webhook waited ${got.at - started} ms`);
    // One at a time per webhook: each slow webhook's second delivery waits for its first.
    for (const n of [1, 2, 3]) assert.equal(receiver.requests.filter((r) => r.path === `/slow/${n}`).length, 1);
    const list = await api('GET', '/webhooks', undefined, {}, other.caller.token);
    for (const webhook of list.body.results)
      await api('DELETE', `/webhooks/${webhook.webhookId}`, undefined, {}, other.caller.token);
    await api('DELETE', `/webhooks/${hook.body.webhookId}`);
  });

  test('A19: answers that show a secret once are not to be cached', async () => {
    const created = await api('POST', '/webhooks', { url: `${base}/hook`, eventTypes: ['nothing.none'] });
    assert.equal(created.headers.get('cache-control'), 'no-store');
    const rotated = await api('POST', `/webhooks/${created.body.webhookId}/signing-secret`);
    assert.equal(rotated.status, 200);
    assert.equal(rotated.headers.get('cache-control'), 'no-store');
    const agent = await api('POST', '/agents', {
      name: 'a19',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'fargate',
    });
    const credentials = await api('POST', `/agents/${agent.body.agentId}/credentials`);
    assert.equal(credentials.headers.get('cache-control'), 'no-store');
    await api('DELETE', `/webhooks/${created.body.webhookId}`);
  });
});
