import assert from 'node:assert/strict';
import { createHmac, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnServe } from '../helpers/processes.ts';

interface Received {
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A webhook receiver on a loopback port; `answer` decides each request's status (or null: never answer). */
class Receiver {
  readonly requests: Received[] = [];
  answer: (request: Received, index: number) => number | null = () => 200;
  private readonly server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      const received = { headers: request.headers, body };
      this.requests.push(received);
      const status = this.answer(received, this.requests.length - 1);
      if (status !== null) response.writeHead(status, { 'content-type': 'text/plain' }).end(status < 300 ? 'ok' : 'down');
    });
  });

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** Requests carrying event `id`. */
  of(id: number): Received[] {
    return this.requests.filter((r) => r.headers['x-event-id'] === String(id));
  }
}

/** What a receiver does to verify a delivery (as docs/webhooks.md shows). */
function verify(secret: string, headers: http.IncomingHttpHeaders, body: string): boolean {
  const timestamp = String(headers['x-signature-timestamp']);
  const expected = `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
  const given = String(headers['x-signature']);
  return given.length === expected.length && timingSafeEqual(Buffer.from(given), Buffer.from(expected));
}

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const SETTINGS = {
  outboundAllowedRanges: ['127.0.0.1'],
  eventsPollMs: 200,
  webhookRetrySeconds: [1, 1],
  webhookDisableAfter: 2,
};

describeEachStore('webhooks', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let developer: string;
  let projectId: string;
  let receiver: Receiver;
  let url: string;
  before(async () => {
    server = await TestServer.start(kind, SETTINGS);
    ({ caller, developer, projectId } = await server.prologue());
    receiver = new Receiver();
    url = await receiver.start();
  });
  after(async () => {
    await receiver.close();
    await server.close();
  });

  const deliveries = async (webhookId: string) =>
    (await server.api('GET', `/webhooks/${webhookId}/deliveries`, { token: caller.token })).body.results as any[];

  test('admins manage webhooks; the signing secret is shown once and sealed at rest', async () => {
    expectProblem(await server.api('POST', '/webhooks', { token: developer, body: { url } }), 403);
    expectProblem(await server.api('GET', '/webhooks', { token: developer }), 403);
    const created = await server.api('POST', '/webhooks', {
      token: caller.token,
      body: { url, eventTypes: ['variables.*'], description: 'first' },
    });
    assert.equal(created.status, 201);
    const { webhookId, signingSecret } = created.body;
    assert.match(signingSecret, /^whsec_/);
    assert.equal(created.headers.get('location'), `/dpc/v1/webhooks/${webhookId}`);
    const read = await server.api('GET', `/webhooks/${webhookId}`, { token: caller.token });
    assert.equal(read.status, 200);
    assert.equal(read.body.signingSecret, undefined);
    assert.deepEqual(read.body.eventTypes, ['variables.*']);
    assert.equal(read.body.enabled, true);
    const row = await server.db.selectFrom('webhooks').selectAll().where('id', '=', webhookId).executeTakeFirstOrThrow();
    assert.ok(!JSON.stringify(row).includes(signingSecret.slice(6)));
    const patched = await server.api('PATCH', `/webhooks/${webhookId}`, {
      token: caller.token,
      body: { enabled: false, description: null },
    });
    assert.equal(patched.status, 200);
    assert.equal(patched.body.enabled, false);
    assert.equal(patched.body.description, undefined);
    const list = await server.api('GET', '/webhooks', { token: caller.token });
    assert.ok(list.body.results.some((w: any) => w.webhookId === webhookId));
    const rotated = await server.api('POST', `/webhooks/${webhookId}/signing-secret`, { token: caller.token });
    assert.equal(rotated.status, 200);
    assert.notEqual(rotated.body.signingSecret, signingSecret);
    assert.equal((await server.api('DELETE', `/webhooks/${webhookId}`, { token: caller.token })).status, 204);
    expectProblem(await server.api('GET', `/webhooks/${webhookId}`, { token: caller.token }), 404);
    const ftp = expectProblem(
      await server.api('POST', '/webhooks', { token: caller.token, body: { url: 'ftp://example.com/x' } }),
      422,
    );
    assert.ok(ftp.violations?.some((v) => v.startsWith('body.url')));
    expectProblem(
      await server.api('POST', '/webhooks', { token: caller.token, body: { url: 'http://169.254.169.254/latest' } }),
      422,
    );
  });

  test('an event is delivered signed, once, and logged', async () => {
    receiver.answer = () => 200;
    const created = await server.api('POST', '/webhooks', {
      token: caller.token,
      body: { url, eventTypes: ['environments.created'], projectId },
    });
    const { webhookId, signingSecret } = created.body;
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'signed' } });
    const log = await until('a delivery that succeeded', async () => {
      const found = await deliveries(webhookId);
      return found.length === 1 && found[0].status === 'SUCCEEDED' ? found : undefined;
    });
    const [request] = receiver.of(log[0].eventId);
    assert.ok(request, 'the receiver got the event');
    assert.equal(receiver.of(log[0].eventId).length, 1);
    assert.ok(verify(signingSecret, request.headers, request.body));
    assert.ok(!verify(signingSecret, request.headers, request.body.replace('signed', 'forged')));
    assert.equal(request.headers['x-event-type'], 'environments.created');
    assert.equal(request.headers['x-delivery-id'], log[0].deliveryId);
    const body = JSON.parse(request.body);
    assert.equal(body.id, log[0].eventId);
    assert.equal(body.type, 'environments.created');
    assert.equal(body.projectId, projectId);
    assert.equal(body.data.resourceIds.environmentName, 'signed');
    assert.equal(log[0].attempts, 1);
    assert.equal(log[0].lastStatusCode, 200);
    // The answer's size and type, never its body (attack finding A25).
    assert.equal(log[0].lastResponse, '2 bytes of text/plain');
    // Another type is not sent.
    await server.api('DELETE', `/projects/${projectId}/environments/signed`, { token: caller.token });
    await new Promise((resolve) => setTimeout(resolve, 800));
    assert.equal((await deliveries(webhookId)).length, 1);
    await server.api('DELETE', `/webhooks/${webhookId}`, { token: caller.token });
  });

  test('a receiver that fails and then recovers gets every event once it is back', async () => {
    let down = true;
    receiver.answer = () => (down ? 503 : 200);
    const { webhookId } = (
      await server.api('POST', '/webhooks', { token: caller.token, body: { url, eventTypes: ['environments.*'] } })
    ).body;
    for (const name of ['r1', 'r2', 'r3']) {
      await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name } });
    }
    const failedOnce = await until('three failed first tries', async () => {
      const found = await deliveries(webhookId);
      return found.length === 3 && found.every((d) => d.attempts >= 1) ? found : undefined;
    });
    assert.ok(failedOnce.every((d) => d.status === 'PENDING' && d.lastStatusCode === 503 && d.nextAttemptAt));
    down = false;
    const done = await until('every delivery succeeded', async () => {
      const found = await deliveries(webhookId);
      return found.every((d) => d.status === 'SUCCEEDED') ? found : undefined;
    });
    for (const delivery of done) {
      const successes = receiver.of(delivery.eventId).filter((_, i, all) => i === all.length - 1);
      assert.equal(successes.length, 1);
      assert.equal(receiver.of(delivery.eventId).length, delivery.attempts);
    }
    const webhook = await server.api('GET', `/webhooks/${webhookId}`, { token: caller.token });
    assert.equal(webhook.body.consecutiveFailures, 0);
    // A manual redelivery sends the same event again; a pending one cannot be redelivered.
    const first = done[0];
    const before = receiver.of(first.eventId).length;
    const again = await server.api('POST', `/webhooks/${webhookId}/deliveries/${first.deliveryId}/redeliver`, {
      token: caller.token,
    });
    assert.equal(again.status, 202);
    assert.equal(again.body.status, 'PENDING');
    await until('the redelivery', () => receiver.of(first.eventId).length > before || undefined);
    await server.api('DELETE', `/webhooks/${webhookId}`, { token: caller.token });
  });

  test('a webhook whose deliveries keep failing every try is disabled, and can be enabled again', async () => {
    receiver.answer = () => 500;
    const { webhookId } = (
      await server.api('POST', '/webhooks', { token: caller.token, body: { url, eventTypes: ['variables.*'] } })
    ).body;
    for (const name of ['v1', 'v2']) {
      const made = await server.api('POST', `/projects/${projectId}/variables`, {
        token: caller.token,
        body: { name, type: 'TEXT', behaviour: 'SHARED', value: 'x' },
      });
      assert.equal(made.status, 201, made.text);
    }
    const disabled = await until('the webhook disabled', async () => {
      const found = await server.api('GET', `/webhooks/${webhookId}`, { token: caller.token });
      return found.body.enabled === false ? found.body : undefined;
    });
    assert.match(disabled.disabledReason, /2 deliveries in a row/);
    const log = await deliveries(webhookId);
    assert.ok(log.every((d) => d.status === 'FAILED' && d.attempts === 3));
    const pending = log[0];
    expectProblem(
      await server.api('POST', `/webhooks/${webhookId}/deliveries/00000000-0000-0000-0000-000000000000/redeliver`, {
        token: caller.token,
      }),
      404,
    );
    const enabled = await server.api('PATCH', `/webhooks/${webhookId}`, { token: caller.token, body: { enabled: true } });
    assert.equal(enabled.body.enabled, true);
    assert.equal(enabled.body.consecutiveFailures, 0);
    assert.equal(enabled.body.disabledReason, undefined);
    assert.ok(pending);
    await server.api('DELETE', `/webhooks/${webhookId}`, { token: caller.token });
  });
});

describeEachStore('webhooks and the processes that did not make them', (kind) => {
  let first: TestServer;
  let second: TestServer;
  let receiver: Receiver;
  before(async () => {
    first = await TestServer.start(kind, SETTINGS);
    second = await TestServer.startBeside(first, SETTINGS);
    receiver = new Receiver();
  });
  after(async () => {
    await receiver.close();
    await second.server.close();
    await first.close();
  });

  // A process passes over the wake-ups of accounts it knows to have no enabled webhook (it learns of other
  // processes' webhooks at its polls): events committed there still reach a webhook another process made.
  test('a webhook made or enabled by one process gets the events another process commits, each once', async () => {
    const url = await receiver.start();
    const { caller, projectId } = await first.prologue();
    // Both processes have polled (and found no webhook of this account) before it has one.
    await new Promise((resolve) => setTimeout(resolve, 2 * SETTINGS.eventsPollMs + 100));
    const { webhookId } = (
      await second.api('POST', '/webhooks', { token: caller.token, body: { url, eventTypes: ['environments.created'] } })
    ).body;
    const names = ['one', 'two', 'three'];
    for (const name of names) {
      const made = await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name } });
      assert.equal(made.status, 201, made.text);
    }
    await until('three deliveries', () => receiver.requests.length >= 3 || undefined);
    // Disabled and enabled again through the first process: what is committed meanwhile and after still goes out.
    await first.api('PATCH', `/webhooks/${webhookId}`, { token: caller.token, body: { enabled: false } });
    await second.api('PATCH', `/webhooks/${webhookId}`, { token: caller.token, body: { enabled: true } });
    await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'four' } });
    await until('four deliveries', () => receiver.requests.length >= 4 || undefined);
    await new Promise((resolve) => setTimeout(resolve, 3 * SETTINGS.eventsPollMs));
    const received = receiver.requests.map(
      (request) => JSON.parse(request.body).data.environmentName ?? JSON.parse(request.body).subject,
    );
    assert.equal(receiver.requests.length, 4, JSON.stringify(received));
    assert.equal(new Set(receiver.requests.map((request) => request.headers['x-event-id'])).size, 4);
  });
});

describeEachStore('webhook delivery when a server process dies mid-delivery', (kind) => {
  let server: TestServer;
  let receiver: Receiver;
  before(async () => {
    // The API only: delivery runs in the other processes.
    server = await TestServer.start(kind, { ...SETTINGS, runJobs: false });
    receiver = new Receiver();
  });
  after(async () => {
    await receiver.close();
    await server.close();
  });

  test("another process takes the delivery over once the dead one's lease runs out; the event id is the same", async () => {
    const url = await receiver.start();
    const { caller, projectId } = await server.prologue();
    const env = {
      DPC_DATA_DIR: server.config.dataDir,
      ...(server.config.databaseUrl && { DATABASE_URL: server.config.databaseUrl }),
      DPC_RUN_JOBS: 'true',
      DPC_JOB_LEASE_MS: '1500',
      DPC_OUTBOUND_ALLOW: '127.0.0.1',
      DPC_OUTBOUND_TIMEOUT_MS: '60000',
      DPC_EVENTS_POLL_MS: '200',
      LOG_LEVEL: 'warn',
    };
    const doomed = await spawnServe(env);
    let killed = false;
    try {
      // The first try is never answered: the process sending it dies meanwhile.
      receiver.answer = (_, index) => (index === 0 ? null : 200);
      const { webhookId } = (
        await server.api('POST', '/webhooks', { token: caller.token, body: { url, eventTypes: ['environments.*'] } })
      ).body;
      await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'crash' } });
      await until('the first try to arrive', () => receiver.requests.length === 1 || undefined);
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      killed = true;
      const survivor = await TestServer.startBeside(server, { runJobs: true, jobLeaseMs: 1500 });
      try {
        const [delivery] = await until('the delivery to succeed on the survivor', async () => {
          const found = (await server.api('GET', `/webhooks/${webhookId}/deliveries`, { token: caller.token })).body.results;
          return found.length === 1 && found[0].status === 'SUCCEEDED' ? found : undefined;
        });
        assert.equal(receiver.requests.length, 2);
        assert.deepEqual(
          receiver.requests.map((r) => r.headers['x-event-id']),
          [String(delivery.eventId), String(delivery.eventId)],
        );
        assert.equal(receiver.requests[0].body, receiver.requests[1].body);
      } finally {
        await survivor.server.close();
      }
    } finally {
      if (!killed) doomed.child.kill('SIGKILL');
    }
  });
});
