import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('Idempotency-Key', (kind) => {
  let server: TestServer;
  let second: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    second = await TestServer.startBeside(server);
    caller = await server.newAccount();
  });
  after(async () => {
    await second.close();
    await server.close();
  });

  const projectCount = async () => (await server.api('GET', '/projects?size=1', { token: caller.token })).body.total as number;
  const auditCount = async () => (await server.api('GET', '/events?size=1', { token: caller.token })).body.total as number;

  test('a retry with the same key and body answers the same without doing the work again', async () => {
    const key = randomUUID();
    const projects = await projectCount();
    const audited = await auditCount();
    const body = { name: `idem ${key}`, description: 'kept once' };
    const first = await server.api('POST', '/projects', { token: caller.token, body, headers: { 'idempotency-key': key } });
    assert.equal(first.status, 201);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    // Sent again to the other instance, with the body formatted otherwise and its members in another order.
    const retry = await second.request('POST', '/dpc/v1/projects', {
      token: caller.token,
      body: JSON.stringify({ description: body.description, name: body.name }, null, 2),
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    });
    assert.equal(retry.status, 201);
    assert.equal(retry.text, first.text);
    assert.equal(retry.headers.get('location'), first.headers.get('location'));
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal(await projectCount(), projects + 1);
    assert.equal(await auditCount(), audited + 1);
  });

  test('the same key with another body or URL is 422; another client may use the same key', async () => {
    const key = randomUUID();
    assert.equal(
      (
        await server.api('POST', '/projects', {
          token: caller.token,
          body: { name: `a ${key}` },
          headers: { 'idempotency-key': key },
        })
      ).status,
      201,
    );
    const other = expectProblem(
      await server.api('POST', '/projects', {
        token: caller.token,
        body: { name: `b ${key}` },
        headers: { 'idempotency-key': key },
      }),
      422,
    );
    assert.deepEqual(other.violations, ['Idempotency-Key: was sent with another request']);
    const developer = await server.tokenFor(caller.accountId, 'admin');
    const projectId = await server.newProject(caller);
    const theirs = await server.api('POST', `/projects/${projectId}/environments`, {
      token: developer,
      body: { name: 'theirs' },
      headers: { 'idempotency-key': key },
    });
    assert.equal(theirs.status, 201);
  });

  test('a failed answer is kept too; a malformed key is 400', async () => {
    const key = randomUUID();
    const projectId = await server.newProject(caller);
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'taken' } });
    const conflict = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'taken' },
      headers: { 'idempotency-key': key },
    });
    expectProblem(conflict, 409);
    await server.api('DELETE', `/projects/${projectId}/environments/taken`, { token: caller.token });
    const again = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'taken' },
      headers: { 'idempotency-key': key },
    });
    assert.equal(again.status, 409);
    assert.equal(again.text, conflict.text);
    const bad = expectProblem(
      await server.api('POST', '/projects', { token: caller.token, body: { name: 'x' }, headers: { 'idempotency-key': 'a b' } }),
      400,
    );
    assert.ok(bad.violations?.[0].startsWith('Idempotency-Key'));
  });

  test('concurrent requests with one key run once; every answer is the one answer', async () => {
    const key = randomUUID();
    const projects = await projectCount();
    const body = { name: `concurrent ${key}` };
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        (i % 2 ? second : server).api('POST', '/projects', { token: caller.token, body, headers: { 'idempotency-key': key } }),
      ),
    );
    assert.equal(await projectCount(), projects + 1);
    const created = answers.filter((answer) => answer.status === 201);
    // Each either got the answer (at once or after waiting for it) or was told the first is still in progress.
    assert.ok(answers.every((answer) => answer.status === 201 || answer.status === 409));
    assert.ok(created.length >= 1);
    assert.equal(new Set(created.map((answer) => answer.body.projectId)).size, 1);
    assert.equal(
      answers.filter((answer) => answer.headers.get('idempotent-replayed') === null && answer.status === 201).length,
      1,
    );
  });

  test('PATCH takes a key too', async () => {
    const key = randomUUID();
    const { webhookId } = (
      await server.api('POST', '/webhooks', { token: caller.token, body: { url: 'https://hooks.example.com/x' } })
    ).body;
    const first = await server.api('PATCH', `/webhooks/${webhookId}`, {
      token: caller.token,
      body: { description: 'once' },
      headers: { 'idempotency-key': key },
    });
    assert.ok(first.status < 300, first.text);
    const retry = await server.api('PATCH', `/webhooks/${webhookId}`, {
      token: caller.token,
      body: { description: 'once' },
      headers: { 'idempotency-key': key },
    });
    assert.equal(retry.status, first.status);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  });
});
