import assert from 'node:assert/strict';
import { createHash, createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { EventStream } from '../helpers/event-stream.ts';
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

/**
 * docs/webhooks.md's Node receiver, as written there: its Express handler, taken out of the doc and run with
 * a request and an answer of our own. The status it answers (401: refused; 204: taken); it must not throw.
 */
function documentedReceiver(): (secret: string, headers: http.IncomingHttpHeaders, body: string) => number {
  const doc = readFileSync(path.join(import.meta.dirname, '../../docs/webhooks.md'), 'utf8');
  const block = doc.split('```js\n').find((part) => part.includes('timingSafeEqual'))!;
  const start = block.indexOf('(req, res) => {');
  const end = block.indexOf('\n  })', start);
  assert.ok(start >= 0 && end > start, 'the Node recipe is in docs/webhooks.md');
  const handlerText = block.slice(start, end + 4);
  return (secret, headers, body) => {
    const handler = new Function('crypto', 'secret', 'seen', 'console', `return ${handlerText}`)(
      { createHmac, timingSafeEqual },
      secret,
      new Set(),
      { log: () => {} },
    ) as (req: unknown, res: unknown) => void;
    let status = 0;
    const req = { body: Buffer.from(body), get: (name: string) => headers[name.toLowerCase()] as string | undefined };
    const res = { sendStatus: (code: number) => (status = code) };
    handler(req, res);
    return status;
  };
}

const SETTINGS = {
  outboundAllowedRanges: ['127.0.0.1'],
  outboundTimeoutMs: 8_000,
  eventsPollMs: 200,
  webhookRetrySeconds: [1],
  webhookDisableAfter: 1,
  eventsStreamsPerClient: 3,
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

  test('A9: webhook.disabled names the webhook by id and its origin; URLs with credentials in their query are 422', async () => {
    for (const query of [
      'token=abc123secretvalue',
      'code=abcDEF123',
      'sig=0a1b2c3d4e',
      'access_token=x9y8z7',
      'X-Amz-Signature=f00d',
    ]) {
      const refused = expectProblem(await api('POST', '/webhooks', { url: `${base}/hook?${query}` }), 422);
      assert.ok(
        refused.violations?.some((v) => v.startsWith('body.url: holds a credential')),
        query,
      );
      assert.ok(!JSON.stringify(refused).includes(query.split('=')[1]), 'the value is not quoted');
    }
    const created = await api('POST', '/webhooks', { url: `${base}/hook?page=2` });
    assert.equal(created.status, 201, created.text);
    expectProblem(
      await api('PATCH', `/webhooks/${created.body.webhookId}`, { url: `${base}/hook?token=abc123secretvalue` }),
      422,
    );
    await api('DELETE', `/webhooks/${created.body.webhookId}`);

    const { caller: owner, viewer, projectId } = await server.prologue();
    const secretPath = `/fail/T0/B1/${randomUUID()}`;
    receiver.answer = (path) => (path.startsWith('/fail') ? 500 : 204);
    const failing = await api(
      'POST',
      '/webhooks',
      { url: `${base}${secretPath}`, eventTypes: ['environments.created'] },
      {},
      owner.token,
    );
    assert.equal(failing.status, 201);
    const stream = await EventStream.open(server.url, viewer, { query: '?type=webhook.*' });
    try {
      await api('POST', `/projects/${projectId}/environments`, { name: 'fails' }, {}, owner.token);
      const [event] = await stream.take(1, 20_000);
      assert.equal(event.type, 'webhook.disabled');
      assert.deepEqual(Object.keys(event.body.data).sort(), ['origin', 'reason', 'webhookId']);
      assert.equal(event.body.data.webhookId, failing.body.webhookId);
      assert.equal(event.body.data.origin, base);
      assert.ok(!JSON.stringify(event.body).includes(secretPath));
    } finally {
      await stream.close();
    }

    // A11: a disabled webhook's delivery is not redelivered (it would wait unannounced): 409 saying so.
    const deliveries = await api('GET', `/webhooks/${failing.body.webhookId}/deliveries`, undefined, {}, owner.token);
    const [delivery] = deliveries.body.results;
    const refused = expectProblem(
      await api(
        'POST',
        `/webhooks/${failing.body.webhookId}/deliveries/${delivery.deliveryId}/redeliver`,
        undefined,
        {},
        owner.token,
      ),
      409,
    );
    assert.match(refused.detail ?? '', /disabled: enable it first/);
  });

  test("A13: a webhook's project must be one of the account's", async () => {
    const other = await server.prologue();
    for (const projectId of [other.projectId, '00000000-0000-4000-8000-000000000000']) {
      const refused = expectProblem(await api('POST', '/webhooks', { url: `${base}/hook`, projectId }), 422);
      assert.deepEqual(refused.violations, ['body.projectId: is not a project of this account']);
    }
    const ours = await server.newProject(caller);
    const created = await api('POST', '/webhooks', { url: `${base}/hook`, projectId: ours });
    assert.equal(created.status, 201);
    const patched = expectProblem(await api('PATCH', `/webhooks/${created.body.webhookId}`, { projectId: other.projectId }), 422);
    assert.deepEqual(patched.violations, ['body.projectId: is not a project of this account']);
    assert.equal((await api('PATCH', `/webhooks/${created.body.webhookId}`, { projectId: null })).status, 200);
    await api('DELETE', `/webhooks/${created.body.webhookId}`);
  });

  test("A10: docs/webhooks.md's Node recipe verifies a delivery and refuses a forged non-ASCII signature without throwing", async () => {
    const created = await api('POST', '/webhooks', { url: `${base}/signed`, eventTypes: ['environments.created'] });
    const projectId = await server.newProject(caller);
    receiver.answer = () => 204;
    await api('POST', `/projects/${projectId}/environments`, { name: 'signed' });
    const got = await until('the signed delivery', () => receiver.requests.find((r) => r.path === '/signed'));
    const secret = created.body.signingSecret as string;
    const verifyAsDocumented = (secret: string, headers: http.IncomingHttpHeaders, body: string) =>
      documentedReceiver()(secret, headers, body) === 204;
    assert.ok(verifyAsDocumented(secret, got.headers, got.body));
    // Same string length as a real signature, one more byte in UTF-8: refused, not a thrown RangeError.
    const forged = { ...got.headers, 'x-signature': `sha256=é${'a'.repeat(63)}` };
    assert.equal(String(forged['x-signature']).length, String(got.headers['x-signature']).length);
    assert.equal(verifyAsDocumented(secret, forged, got.body), false);
    assert.equal(verifyAsDocumented(secret, got.headers, got.body.replace('signed', 'forged')), false);
    await api('DELETE', `/webhooks/${created.body.webhookId}`);
  });

  test('A14: an API client holds at most DPC_EVENTS_STREAMS_PER_CLIENT streams open on a process; more are 429', async () => {
    const viewer = await server.tokenFor(caller.accountId, 'viewer');
    const streams = await Promise.all(Array.from({ length: 3 }, () => EventStream.open(server.url, viewer)));
    assert.deepEqual(
      streams.map((stream) => stream.status),
      [200, 200, 200],
    );
    try {
      const refused = await EventStream.open(server.url, viewer);
      if (refused.status === 200) refused.close();
      assert.equal(refused.status, 429);
      assert.match(refused.problem.detail, /already has 3 event streams open/);
      // Another client of the account is counted apart.
      const other = await EventStream.open(server.url, await server.tokenFor(caller.accountId, 'viewer'));
      assert.equal(other.status, 200);
      other.close();
      // A stream that closes frees its place.
      streams.pop()!.close();
      const again = await until('a place freed', async () => {
        const opened = await EventStream.open(server.url, viewer);
        return opened.status === 200 ? opened : undefined;
      });
      streams.push(again);
    } finally {
      for (const stream of streams) stream.close();
    }
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
