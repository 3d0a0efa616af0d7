import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, test } from 'node:test';
// @ts-expect-error: the parser ships no types
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { sql } from 'kysely';
import { describeEachStore, TestServer } from '../helpers/harness.ts';

interface Family {
  name: string;
  type: string;
  metrics: { labels?: Record<string, string>; value?: string; buckets?: Record<string, string> }[];
}

describeEachStore('observability', (kind) => {
  let server: TestServer;
  before(async () => {
    server = await TestServer.start(kind, { rateLimitMax: 3, rateLimitWindowMs: 60_000, metricsToken: 'scrape-me' });
  });
  after(() => server.close());

  test('/livez and /readyz answer 200 while serving', async () => {
    assert.deepEqual((await server.request('GET', '/livez')).body, { status: 'ok' });
    assert.deepEqual((await server.request('GET', '/readyz')).body, { status: 'ready' });
  });

  test('/metrics needs its token, and counts requests by route template, never by id', async () => {
    assert.equal((await server.request('GET', '/metrics')).status, 401);
    const caller = await server.newAccount();
    const projectId = await server.newProject(caller);
    await server.api('GET', `/projects/${projectId}`, { token: caller.token });
    for (let i = 0; i < 4; i += 1) await server.api('GET', `/projects/${projectId}/environments`, { token: caller.token });
    const form = new FormData();
    form.append('a.sql', new Blob(['select 1;'], { type: 'text/plain' }), 'a.sql');
    const uploader = await server.tokenFor(caller.accountId, 'developer'); // rate-limited apart from the caller
    assert.equal(
      (await server.api('POST', `/projects/${projectId}/environments`, { token: uploader, body: { name: 'dev' } })).status,
      201,
    );
    const uploaded = await server.api('POST', `/projects/${projectId}/artifacts`, {
      token: uploader,
      body: form,
      headers: { versionName: 'v1', environmentName: 'dev' },
    });
    assert.equal(uploaded.status, 200);

    const answer = await server.request('GET', '/metrics', { headers: { authorization: 'Bearer scrape-me' } });
    assert.equal(answer.status, 200);
    assert.match(answer.headers.get('content-type')!, /^text\/plain; version=0\.0\.4/);
    assert.ok(!answer.text.includes(projectId) && !answer.text.includes(caller.clientId), 'no id in any label');
    const families = new Map((parsePrometheusTextFormat(answer.text) as Family[]).map((f) => [f.name, f]));
    const requests = families.get('dpc_http_requests_total')!;
    assert.equal(requests.type, 'COUNTER');
    assert.ok(
      requests.metrics.some(
        (m) => m.labels?.route === '/dpc/v1/projects/:projectId' && m.labels.status === '200' && m.value === '1',
      ),
    );
    assert.ok(
      requests.metrics.some((m) => m.labels?.route === '/dpc/v1/projects/:projectId/environments' && m.labels.status === '429'),
    );
    assert.equal(families.get('dpc_http_request_duration_seconds')!.type, 'HISTOGRAM');
    assert.ok(Number(families.get('dpc_http_rate_limited_total')!.metrics[0].value) >= 1);
    assert.ok(Number(families.get('dpc_upload_received_bytes_total')!.metrics[0].value) > 0);
    assert.ok(Number(families.get('dpc_store_query_duration_seconds')!.metrics[0].buckets!['+Inf']) > 0);
    assert.ok(families.has('dpc_jobs'));
    assert.ok(families.has('dpc_process_resident_memory_bytes') || families.has('dpc_nodejs_heap_size_used_bytes'));
  });

  test('a request the client abandons is counted', async () => {
    const caller = await server.newAccount();
    const socket = connect(Number(new URL(server.url).port), '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(
      `POST /dpc/v1/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${caller.token}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"na',
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    socket.destroy();
    await new Promise((resolve) => setTimeout(resolve, 200));
    const text = (await server.request('GET', '/metrics', { headers: { authorization: 'Bearer scrape-me' } })).text;
    assert.match(text, /dpc_http_requests_abandoned_total\{method="POST",route="\/dpc\/v1\/projects"\} 1/);
  });

  test('readiness turns 503 at the start of a graceful shutdown while liveness stays 200', async () => {
    const draining = await TestServer.start(kind, { shutdownDrainMs: 1500 });
    const closed = draining.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const ready = await draining.request('GET', '/readyz');
    assert.equal(ready.status, 503);
    assert.match(ready.body.detail, /shutting down/);
    assert.equal((await draining.request('GET', '/livez')).status, 200);
    await closed;
  });

  test('readiness is 503 while a migration of this code is not applied to the store', async () => {
    const behind = await TestServer.start(kind);
    try {
      await sql`delete from kysely_migration where name = '0009_client_revocation'`.execute(behind.db);
      const ready = await behind.request('GET', '/readyz');
      assert.equal(ready.status, 503);
      assert.match(ready.body.detail, /0009_client_revocation/);
      assert.equal((await behind.request('GET', '/livez')).status, 200);
    } finally {
      await behind.close();
    }
  });

  test('DPC_METRICS=false serves no /metrics', async () => {
    const quiet = await TestServer.start(kind, { metrics: false });
    try {
      assert.equal((await quiet.request('GET', '/metrics')).status, 404);
    } finally {
      await quiet.close();
    }
  });
});
