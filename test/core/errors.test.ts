import { Type } from 'typebox';
import { validatorCompiler } from '../../src/core/validation.ts';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import path from 'node:path';
import { connect } from 'node:net';
import { request as httpRequest } from 'node:http';
import SQLite from 'better-sqlite3';
import { sql } from 'kysely';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('every error is problem+json', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind, { bodyLimit: 4096 });
    caller = await server.newAccount();
  });
  after(() => server.close());

  test('unknown route: 404 not-found with the path as instance', async () => {
    const problem = expectProblem(await server.api('GET', '/nothing-here', { token: caller.token }), 404, 'not-found');
    assert.equal(problem.instance, '/dpc/v1/nothing-here');
    assert.equal(problem.title, 'Not Found');
    expectProblem(await server.request('GET', '/elsewhere'), 404, 'not-found');
  });

  test('a sane incoming X-Request-Id is kept (answered and logged as the request id); another is replaced', async () => {
    const idOf = async (id: string) =>
      (await server.request('GET', '/healthz', { headers: { 'x-request-id': id } })).headers.get('x-request-id');
    for (const id of ['trace-1234', 'a.b:c_d-e', 'x'.repeat(128)]) assert.equal(await idOf(id), id);
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
    for (const id of ['x'.repeat(129), 'has space', 'semi;colon', '"quoted"']) assert.match((await idOf(id))!, uuid, id);
  });

  test('what the HTTP parser refuses (bad header bytes, headers over the limit) is problem+json too', async () => {
    const rawAnswer = (request: Buffer) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(Number(new URL(server.url).port), '127.0.0.1');
        let answer = '';
        socket.on('data', (chunk) => (answer += chunk));
        socket.on('close', () => resolve(answer));
        socket.on('error', reject);
        socket.write(request);
      });
    const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
    // A NUL in a header value, a NUL or 0xFF in a header name (0xFF in a value is obs-text, which HTTP allows).
    for (const bad of [Buffer.from('X: a\0b'), Buffer.from('X\0Y: a'), Buffer.from([0xff, 0x3a, 0x20, 0x61])]) {
      const answer = await rawAnswer(
        Buffer.concat([Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n'), bad, Buffer.from('\r\nConnection: close\r\n\r\n')]),
      );
      assert.match(answer, /^HTTP\/1\.1 400 /);
      assert.match(answer, /content-type: application\/problem\+json/i);
      assert.equal(bodyOf(answer).type, `${server.config.problemTypeBase}/bad-request`);
    }
    const large = await rawAnswer(
      Buffer.from(`GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`),
    );
    assert.match(large, /^HTTP\/1\.1 431 /);
    assert.deepEqual(
      { status: bodyOf(large).status, title: bodyOf(large).title },
      { status: 431, title: 'Request Header Fields Too Large' },
    );
  });

  test('a client streaming a body far over the limit reads the 413 problem, not a broken pipe', async () => {
    const url = new URL(`${server.url}/dpc/v1/projects`);
    const size = 16 * 1024 * 1024;
    for (let i = 0; i < 3; i += 1) {
      const answer = await new Promise<{ status?: number; type?: string; error?: string }>((resolve) => {
        const req = httpRequest(url, {
          method: 'POST',
          headers: { authorization: `Bearer ${caller.token}`, 'content-type': 'application/json', 'content-length': size },
        });
        req.on('response', (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'] }));
        });
        req.on('error', (error: NodeJS.ErrnoException) => resolve({ error: error.code }));
        const chunk = Buffer.alloc(64 * 1024, 'a');
        let sent = 0;
        const write = () => {
          while (sent < size) {
            sent += chunk.length;
            if (!req.write(chunk)) return void req.once('drain', write);
          }
          req.end();
        };
        write();
      });
      assert.deepEqual(answer, { status: 413, type: 'application/problem+json; charset=utf-8' });
    }
  });

  test('known path, wrong method: 405 with Allow', async () => {
    const answer = await server.api('PUT', '/projects', { token: caller.token, body: {} });
    expectProblem(answer, 405, 'method-not-allowed');
    assert.equal(answer.headers.get('allow'), 'GET, HEAD, POST');
  });

  test('a URL the router cannot take: 414 or 400, as problem+json', async () => {
    const long = 'x'.repeat(1100);
    expectProblem(await server.api('GET', `/projects/${long}`, { token: caller.token }), 414, 'uri-too-long');
    expectProblem(await server.api('GET', '/projects/%E0%A4%A', { token: caller.token }), 400, 'bad-request');
  });

  test('malformed JSON: 400 bad-request', async () => {
    const answer = await server.api('POST', '/projects', {
      token: caller.token,
      body: '{"name":',
      headers: { 'content-type': 'application/json' },
    });
    expectProblem(answer, 400, 'bad-request');
  });

  test('a number JSON writes but a double cannot hold (1e999) is a 400 naming where, and nothing is written', async () => {
    const projectId = (await server.api('POST', '/projects', { token: caller.token, body: { name: 'numbers' } })).body.projectId;
    const send = (path: string, body: string) =>
      server.api('POST', path, { token: caller.token, body, headers: { 'content-type': 'application/json' } });
    const variable = await send(
      `/projects/${projectId}/variables`,
      '{"name":"inf","type":"NUMBER","behaviour":"COPIED","value":1e999}',
    );
    assert.deepEqual(expectProblem(variable, 400, 'bad-request').violations, [
      'body.value: a number past the range of a double (about 1.8e308)',
    ]);
    const deep = await send(`/projects/${projectId}/variables`, `{"a":[{"b":-${'9'.repeat(400)}}],"c":1E+308,"d":2e-999}`);
    assert.deepEqual(expectProblem(deep, 400, 'bad-request').violations, [
      'body.a.0.b: a number past the range of a double (about 1.8e308)',
    ]);
    const listed = await server.api('GET', `/projects/${projectId}/variables`, { token: caller.token });
    assert.equal(listed.status, 200, listed.text);
    assert.equal(listed.body.results.length, 0);
  });

  test('a content type other than JSON: 415 unsupported-media-type', async () => {
    for (const type of ['text/plain', 'application/xml']) {
      const answer = await server.api('POST', '/projects', {
        token: caller.token,
        body: 'name=x',
        headers: { 'content-type': type },
      });
      expectProblem(answer, 415, 'unsupported-media-type');
    }
  });

  test('a body over the limit: 413 payload-too-large', async () => {
    const answer = await server.api('POST', '/projects', { token: caller.token, body: { name: 'x'.repeat(5000) } });
    expectProblem(answer, 413, 'payload-too-large');
  });

  test('validation: 400 with a violation naming each field', async () => {
    const answer = await server.api('POST', '/projects', { token: caller.token, body: { name: '', description: 5 } });
    const problem = expectProblem(answer, 400, 'bad-request');
    assert.deepEqual(problem.violations?.sort(), [
      'body.description: must be string',
      'body.name: must NOT have fewer than 1 characters',
    ]);
    const missing = expectProblem(await server.api('POST', '/projects', { token: caller.token, body: {} }), 400);
    assert.deepEqual(missing.violations, ['body.name: is required']);
    const badPage = expectProblem(await server.api('GET', '/projects?page=-1&size=101', { token: caller.token }), 400);
    assert.deepEqual(badPage.violations?.sort(), ['page: must be >= 0', 'size: must be <= 100']);
    // PostgreSQL's text holds no NUL character: refused on either store, anywhere in the request.
    const nul = expectProblem(
      await server.api('POST', '/projects', { token: caller.token, body: { name: 'nul', description: 'a\u0000b' } }),
      400,
    );
    assert.deepEqual(nul.violations, ['body.description: must not contain a NUL character']);
    const listed = await server.api('GET', '/projects?size=100', { token: caller.token });
    assert.ok(!listed.body.results.some((p: { name: string }) => p.name === 'nul'), 'nothing was stored');
    // In a member's name too (a map of paths): a review's files.
    const reviewed = await server.api('POST', '/projects', { token: caller.token, body: { name: 'nul names' } });
    await server.api('POST', `/projects/${reviewed.body.projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
    const nulName = expectProblem(
      await server.api('POST', `/projects/${reviewed.body.projectId}/reviews`, {
        token: caller.token,
        body: { environmentName: 'dev', files: { 'a\u0000.orch.yaml': 'z' } },
      }),
      400,
    );
    assert.deepEqual(nulName.violations, ['body.files.a\u0000.orch.yaml: must not have a NUL character in its name']);
    // A body nested deeper than any operation takes is refused, not walked until the stack runs out.
    for (const depth of [65, 1500]) {
      const deep = expectProblem(
        await server.api('POST', '/directory-integration/scim/v2/Users', {
          token: caller.token,
          body: `{"userName":"deep","title":${'['.repeat(depth)}${']'.repeat(depth)}}`,
          headers: { 'content-type': 'application/json', accept: 'application/problem+json' },
        }),
        400,
      );
      assert.match(deep.violations?.[0] ?? '', /^body\.title(\.0)+: must not be nested more than 64 levels deep$/);
    }
    // The same for query strings, path parameters and headers, with or without a pattern of their own.
    const validateQuery = validatorCompiler({
      schema: Type.Object({ q: Type.String(), list: Type.Array(Type.String()) }),
      httpPart: 'querystring',
      method: 'GET',
      url: '/',
    }) as ((data: unknown) => boolean) & { errors?: { instancePath: string; message: string }[] };
    assert.equal(validateQuery({ q: 'fine', list: ['x'] }), true);
    assert.equal(validateQuery({ q: 'fine', list: ['x', 'a\u0000b'] }), false);
    assert.deepEqual(validateQuery.errors?.[0].instancePath, '/list/1');
    // A page past what a store's offset can hold is refused, not a failure of the store.
    const hugePage = expectProblem(await server.api('GET', '/projects?page=9999999999999999999', { token: caller.token }), 400);
    assert.deepEqual(hugePage.violations, ['page: must be <= 2147483647']);
    const lastPage = await server.api('GET', '/projects?page=2147483647&size=100', { token: caller.token });
    assert.equal(lastPage.status, 200);
    assert.deepEqual(lastPage.body.results, []);
  });

  test('an unexpected failure: 500 without internals, with the request id', async () => {
    // Renamed rather than dropped: other tables' foreign keys refer to it.
    await sql`alter table environments rename to environments_gone`.execute(server.db);
    const projectId = await server.newProject(caller);
    const answer = await server.api('GET', `/projects/${projectId}/environments`, { token: caller.token });
    const problem = expectProblem(answer, 500, 'internal-server-error');
    const requestId = answer.headers.get('x-request-id');
    assert.ok(requestId && problem.detail.includes(requestId));
    assert.doesNotMatch(problem.detail, /environments|stack|at \w+ \(|SQLITE|relation/i);
    assert.deepEqual(Object.keys(problem).sort(), ['detail', 'instance', 'status', 'title', 'type']);
  });
});

describeEachStore('rate limiting', (kind) => {
  let server: TestServer;
  before(async () => {
    server = await TestServer.start(kind, { rateLimitMax: 3, rateLimitWindowMs: 60_000 });
  });
  after(() => server.close());

  test('past the limit a client gets 429 too-many-requests with Retry-After; other clients are counted apart', async () => {
    const caller = await server.newAccount();
    const other = await server.tokenFor(caller.accountId, 'viewer');
    const statuses = [];
    for (let i = 0; i < 3; i += 1) statuses.push((await server.api('GET', '/projects', { token: caller.token })).status);
    assert.deepEqual(statuses, [200, 200, 200]);
    const limited = await server.api('GET', '/projects', { token: caller.token });
    expectProblem(limited, 429, 'too-many-requests');
    assert.ok(Number(limited.headers.get('retry-after')) > 0);
    assert.equal((await server.api('GET', '/projects', { token: other })).status, 200);
  });

  test('failed authentications count against the address: guessing tokens ends in 429', async () => {
    const guesser = await TestServer.startBeside(server);
    try {
      const statuses = [];
      for (let i = 0; i < 4; i += 1) {
        statuses.push((await guesser.api('GET', '/projects', { token: `not-a-token-${i}` })).status);
      }
      assert.deepEqual(statuses, [401, 401, 401, 429]);
      const limited = await guesser.api('GET', '/projects');
      expectProblem(limited, 429, 'too-many-requests');
      assert.ok(Number(limited.headers.get('retry-after')) > 0);
    } finally {
      await guesser.close();
    }
  });
});

test('a store locked past its busy timeout: 503 with Retry-After, nothing written [sqlite]', async (t) => {
  const server = await TestServer.start('sqlite');
  t.after(() => server.close());
  const caller = await server.newAccount();
  // Another process holds the write lock for longer than the 5-second busy timeout.
  const other = new SQLite(path.join(server.config.dataDir, 'platform.db'));
  other.exec('begin immediate');
  try {
    const answer = await server.api('POST', '/projects', { token: caller.token, body: { name: 'blocked' } });
    const problem = expectProblem(answer, 503, 'service-unavailable');
    assert.match(problem.detail, /nothing was written/);
    assert.equal(answer.headers.get('retry-after'), '1');
  } finally {
    other.exec('rollback');
    other.close();
  }
  const listed = await server.api('GET', '/projects', { token: caller.token });
  assert.equal(listed.body.total, 0);
});
