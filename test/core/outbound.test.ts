import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { OutboundClient, OutboundError, type OutboundFailure, type OutboundSettings } from '../../src/core/outbound.ts';
import { selfSignedCertificate, startLoopbackApi, type LoopbackApi } from '../helpers/loopback.ts';

const defaults: OutboundSettings = { allowedRanges: [], timeoutMs: 2000, maxResponseBytes: 1000, maxRedirects: 3 };

async function failure(promise: Promise<unknown>): Promise<OutboundFailure> {
  const error = await promise.then(
    () => assert.fail('expected the request to fail'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof OutboundError, `expected an OutboundError, got ${error}`);
  return error.failure;
}

describe('outbound requests', () => {
  let api: LoopbackApi;
  let other: LoopbackApi;
  before(async () => {
    api = await startLoopbackApi((request, response) => {
      const [route, query] = request.url.split('?');
      const param = new URLSearchParams(query);
      if (route === '/redirect')
        return void response.writeHead(Number(param.get('status') ?? 302), { location: param.get('to')! }).end();
      if (route === '/loop') return void response.writeHead(302, { location: '/loop' }).end();
      if (route === '/big') return void response.writeHead(200).end('x'.repeat(5000));
      if (route === '/silent') return; // never answers
      response.writeHead(201, { 'content-type': 'text/plain', 'x-seen': request.method }).end('hello');
    });
    other = await startLoopbackApi();
  });
  after(async () => {
    await api.close();
    await other.close();
  });

  test('by default, loopback, private, link-local and reserved addresses are refused before any connection', async () => {
    const client = new OutboundClient(defaults);
    const before = api.received.length;
    for (const url of [
      `${api.url}/`,
      `http://localhost:${api.port}/`, // the DNS answer is loopback
      `http://[::1]:${api.port}/`,
      `http://[::ffff:127.0.0.1]:${api.port}/`,
      `http://0.0.0.0:${api.port}/`,
      'http://10.1.2.3/',
      'http://172.16.0.1/',
      'http://192.168.1.1/',
      'http://169.254.169.254/latest/meta-data/',
      'http://100.64.0.1/',
      'http://[fc00::1]/',
      'http://[fe80::1]/',
    ]) {
      assert.equal(await failure(client.send({ method: 'GET', url: new URL(url), headers: {} })), 'refused', url);
    }
    assert.equal(api.received.length, before, 'nothing reached the loopback API');
    assert.ok(client.allows('93.184.216.34') && client.allows('2606:4700::1111'), 'public addresses are allowed');
  });

  test('configured ranges are allowed; the answer carries status, headers and body', async () => {
    const client = new OutboundClient({ ...defaults, allowedRanges: ['127.0.0.1/32'] });
    const response = await client.send({
      method: 'POST',
      url: new URL(`${api.url}/hello`),
      headers: { 'content-type': 'text/plain' },
      body: 'ping',
    });
    assert.equal(response.status, 201);
    assert.equal(response.headers['x-seen'], 'POST');
    assert.equal(response.body.toString(), 'hello');
    assert.equal(response.truncated, false);
    assert.equal(api.received.at(-1)!.body, 'ping');
    assert.equal(
      await failure(client.send({ method: 'GET', url: new URL(`http://127.0.0.2:${api.port}/`), headers: {} })),
      'refused',
    );
  });

  test('every redirect is checked: to a private or loopback address is refused', async () => {
    const client = new OutboundClient({ ...defaults, allowedRanges: ['127.0.0.1/32'] });
    for (const to of ['http://10.0.0.1/', `http://[::1]:${api.port}/`, 'http://[::ffff:10.0.0.1]/', 'http://192.168.0.10/']) {
      const url = new URL(`${api.url}/redirect?to=${encodeURIComponent(to)}`);
      assert.equal(await failure(client.send({ method: 'GET', url, headers: {} })), 'refused', to);
    }
  });

  test('a redirect is followed; credentials stay with their origin', async () => {
    const client = new OutboundClient({ ...defaults, allowedRanges: ['127.0.0.1/32'] });
    const headers = { authorization: 'Bearer secret-1', 'x-api-key': 'secret-2', accept: 'text/plain' };
    const same = await client.send({
      method: 'GET',
      url: new URL(`${api.url}/redirect?to=/landing`),
      headers,
      credentialHeaders: ['X-Api-Key'],
    });
    assert.equal(same.status, 201);
    assert.equal(api.received.at(-1)!.headers.authorization, 'Bearer secret-1');
    const away = await client.send({
      method: 'GET',
      url: new URL(`${api.url}/redirect?to=${encodeURIComponent(`${other.url}/landing`)}`),
      headers,
      credentialHeaders: ['X-Api-Key'],
    });
    assert.equal(away.status, 200);
    const seen = other.received.at(-1)!;
    assert.equal(seen.url, '/landing');
    assert.equal(seen.headers.authorization, undefined);
    assert.equal(seen.headers['x-api-key'], undefined);
    assert.equal(seen.headers.accept, 'text/plain');
  });

  test('303 continues as a GET without the body; 307 keeps method and body', async () => {
    const client = new OutboundClient({ ...defaults, allowedRanges: ['127.0.0.1/32'] });
    const send = (status: number) =>
      client.send({
        method: 'POST',
        url: new URL(`${api.url}/redirect?status=${status}&to=/after`),
        headers: { 'content-type': 'text/plain' },
        body: 'data',
      });
    assert.equal((await send(303)).headers['x-seen'], 'GET');
    assert.equal(api.received.at(-1)!.body, '');
    assert.equal((await send(307)).headers['x-seen'], 'POST');
    assert.equal(api.received.at(-1)!.body, 'data');
  });

  test('HTTPS is verified: a self-signed certificate is trusted only when the deployment names it', async () => {
    const certificate = selfSignedCertificate();
    const secure = await startLoopbackApi(undefined, certificate);
    try {
      const request = { method: 'GET', url: new URL(`${secure.url}/`), headers: {} };
      const untrusting = new OutboundClient({ ...defaults, allowedRanges: ['127.0.0.1'] });
      assert.equal(await failure(untrusting.send(request)), 'unreachable');
      const trusting = new OutboundClient({ ...defaults, allowedRanges: ['127.0.0.1'], caFile: certificate.certFile });
      assert.equal((await trusting.send(request)).status, 200);
    } finally {
      await secure.close();
      certificate.remove();
    }
  });

  test('redirects, time and response size are bounded; only http(s) is spoken', async () => {
    const client = new OutboundClient({ ...defaults, allowedRanges: ['127.0.0.1/32'], timeoutMs: 300 });
    assert.equal(await failure(client.send({ method: 'GET', url: new URL(`${api.url}/loop`), headers: {} })), 'unreachable');
    const started = Date.now();
    assert.equal(await failure(client.send({ method: 'GET', url: new URL(`${api.url}/silent`), headers: {} })), 'timeout');
    assert.ok(Date.now() - started < 2000);
    const big = await client.send({ method: 'GET', url: new URL(`${api.url}/big`), headers: {} });
    assert.equal(big.body.length, 1000);
    assert.equal(big.truncated, true);
    assert.equal(await failure(client.send({ method: 'GET', url: new URL('ftp://127.0.0.1/'), headers: {} })), 'invalid');
    assert.equal(
      await failure(client.send({ method: 'GET', url: new URL(`${api.url}/`), headers: { 'x-bad': 'a\r\nb' } })),
      'invalid',
    );
  });
});
