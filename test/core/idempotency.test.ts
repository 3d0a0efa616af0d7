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

  test('an upload retried with the same key: the same parts replay, other parts (bytes, names, filenames, types) are 422', async () => {
    const projectId = await server.newProject(caller);
    const created = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'dev' },
    });
    assert.equal(created.status, 201, created.text);
    type File = [name: string, content: string, filename?: string, type?: string];
    const formOf = (files: File[]) => {
      const form = new FormData();
      for (const [name, content, filename = 'file', type = 'text/plain'] of files)
        form.append(name, new Blob([content], { type }), filename);
      return form;
    };
    const upload = (instance: TestServer, key: string, files: File[]) =>
      instance.api('POST', `/projects/${projectId}/artifacts`, {
        token: caller.token,
        body: formOf(files),
        headers: { 'idempotency-key': key, versionName: `v-${key}`, environmentName: 'dev' },
      });
    const asset = (key: string, path: string) =>
      server.api(
        'GET',
        `/projects/${projectId}/artifacts/assets?${new URLSearchParams({ environmentName: 'dev', versionName: `v-${key}`, path })}`,
        {
          token: caller.token,
        },
      );
    const files: File[] = [
      ['pipelines/a.orch.yaml', 'type: orchestration\n'],
      ['b.sql', 'select 1;'],
    ];
    const key = randomUUID();
    const first = await upload(server, key, files);
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    // A true retry (a new boundary, to the other instance): the same answer, not run again.
    const retry = await upload(second, key, files);
    assert.equal(retry.status, 200, retry.text);
    assert.equal(retry.text, first.text);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    const others: File[][] = [
      [files[0], ['b.sql', 'select 2;']], // other bytes
      [files[0], ['c.sql', 'select 1;']], // another part name
      [files[0], ['b.sql', 'select 1;', 'other']], // another filename
      [files[0], ['b.sql', 'select 1;', 'file', 'application/sql']], // another content type
      [files[0]], // a part fewer
      [...files, ['c.sql', 'select 3;']], // a part more
    ];
    for (const other of others) {
      const answer = expectProblem(await upload(server, key, other), 422);
      assert.deepEqual(answer.violations, ['Idempotency-Key: was sent with another request']);
    }
    assert.equal((await asset(key, 'b.sql')).text, 'select 1;');
    // At once, with one key: one upload runs; the other, with other parts, is never answered as its success.
    const raceKey = randomUUID();
    const raced = await Promise.all([
      upload(server, raceKey, files),
      upload(second, raceKey, [files[0], ['b.sql', 'select 9;']]),
    ]);
    const [ran, other] =
      raced[0].headers.get('idempotent-replayed') === null && raced[0].status === 200 ? raced : [raced[1], raced[0]];
    assert.equal(ran.status, 200, ran.text);
    assert.equal(ran.headers.get('idempotent-replayed'), null);
    assert.ok([409, 422].includes(other.status), `${other.status} ${other.text}`);
    const stored = (await asset(raceKey, 'b.sql')).text;
    assert.equal(stored, ran === raced[0] ? 'select 1;' : 'select 9;');
    // A key whose first request was refused before its parts were read keeps nothing: the retry runs.
    const refusedKey = randomUUID();
    const refused = await server.api('POST', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: formOf(files),
      headers: { 'idempotency-key': refusedKey, versionName: `v-${refusedKey}`, environmentName: 'nowhere' },
    });
    assert.equal(refused.status, 404, refused.text);
    const rows = await server.db.selectFrom('idempotencyKeys').select('key').where('key', '=', refusedKey).execute();
    assert.deepEqual(rows, []);
  });
});
