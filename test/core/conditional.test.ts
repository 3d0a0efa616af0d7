import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('conditional requests (ETag, If-None-Match, If-Match)', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
  });
  after(() => server.close());

  test('reads and list pages carry an ETag; If-None-Match answers 304 until the answer changes', async () => {
    const projectId = await server.newProject(caller);
    const read = await server.api('GET', `/projects/${projectId}`, { token: caller.token });
    const tag = read.headers.get('etag')!;
    assert.match(tag, /^"[^"]+"$/);
    const unchanged = await server.api('GET', `/projects/${projectId}`, {
      token: caller.token,
      headers: { 'if-none-match': tag },
    });
    assert.equal(unchanged.status, 304);
    assert.equal(unchanged.text, '');
    assert.equal(unchanged.headers.get('etag'), tag);
    // A list of tags, and a weak form of the tag, match too.
    assert.equal(
      (
        await server.api('GET', `/projects/${projectId}`, {
          token: caller.token,
          headers: { 'if-none-match': `"other", W/${tag}` },
        })
      ).status,
      304,
    );
    const list = await server.api('GET', `/projects/${projectId}/environments`, { token: caller.token });
    const listTag = list.headers.get('etag')!;
    assert.equal(
      (
        await server.api('GET', `/projects/${projectId}/environments`, {
          token: caller.token,
          headers: { 'if-none-match': listTag },
        })
      ).status,
      304,
    );
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
    const changed = await server.api('GET', `/projects/${projectId}/environments`, {
      token: caller.token,
      headers: { 'if-none-match': listTag },
    });
    assert.equal(changed.status, 200);
    assert.notEqual(changed.headers.get('etag'), listTag);
  });

  test('If-Match on PATCH and DELETE: the current version passes, a stale one is 412 and changes nothing', async () => {
    const created = await server.api('POST', '/webhooks', {
      token: caller.token,
      body: { url: 'https://hooks.example.com/a', description: 'v1' },
    });
    const path = `/webhooks/${created.body.webhookId}`;
    const v1 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
    const first = await server.api('PATCH', path, {
      token: caller.token,
      body: { description: 'v2' },
      headers: { 'if-match': v1 },
    });
    assert.equal(first.status, 200);
    // A second writer still holding v1 has lost the race.
    const lost = expectProblem(
      await server.api('PATCH', path, { token: caller.token, body: { description: 'v3' }, headers: { 'if-match': v1 } }),
      412,
    );
    assert.deepEqual(lost.violations, ['If-Match: does not name the current version']);
    assert.equal((await server.api('GET', path, { token: caller.token })).body.description, 'v2');
    const v2 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
    expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': v1 } }), 412);
    expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': `W/${v2}` } }), 412);
    assert.equal((await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': v2 } })).status, 204);
    expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': '*' } }), 412);
  });

  test('If-Match where no GET answers the URL is 400 naming the header, and nothing is done', async () => {
    const projectId = await server.newProject(caller);
    const created = await server.api('POST', `/projects/${projectId}/variables`, {
      token: caller.token,
      body: { name: 'region', type: 'TEXT', behaviour: 'SHARED', value: 'eu' },
    });
    assert.equal(created.status, 201, created.text);
    const path = `/projects/${projectId}/variables/region`;
    assert.equal((await server.api('GET', path, { token: caller.token })).status, 405);
    const refused = expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': '*' } }), 400);
    assert.deepEqual(refused.violations, ['If-Match: not supported on this URL (it has no GET)']);
    // Still there: without the header it goes.
    assert.equal((await server.api('DELETE', path, { token: caller.token })).status, 204);
  });

  for (const resource of ['webhook', 'schedule'] as const) {
    test(`a write without If-Match that lands between the check and the write (${resource}): the If-Match writer gets 412, no lost update`, async () => {
      let path: string;
      let field: 'description' | 'name';
      if (resource === 'webhook') {
        const created = await server.api('POST', '/webhooks', {
          token: caller.token,
          body: { url: 'https://hooks.example.com/c', description: 'v1' },
        });
        path = `/webhooks/${created.body.webhookId}`;
        field = 'description';
      } else {
        const projectId = await server.newProject(caller);
        await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
        const created = await server.api('POST', `/projects/${projectId}/schedules`, {
          token: caller.token,
          body: {
            name: 'v1',
            cronExpression: '0 3 * * *',
            pipelineName: 'pipelines/daily-load.orch.yaml',
            environmentName: 'dev',
            scheduleEnabled: false,
          },
        });
        assert.equal(created.status, 201, created.text);
        path = `/projects/${projectId}/schedules/${created.body.scheduleId}`;
        field = 'name';
      }
      const v1 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
      // The check reads the resource through the server (app.inject): another client's write, without If-Match,
      // is made to land right after that read, before the If-Match request writes.
      const app = server.server.app;
      const inject = app.inject;
      let between: string | undefined;
      const interleaved: string[] = [];
      app.inject = (async (options: { method: string; url: string }) => {
        const answer = await (inject as (o: unknown) => Promise<unknown>).call(app, options);
        if (between && options.method === 'GET' && options.url.endsWith(path)) {
          const value = between;
          between = undefined;
          const theirs = await server.api('PATCH', path, { token: caller.token, body: { [field]: value } });
          assert.equal(theirs.status, 200, theirs.text);
          interleaved.push(value);
        }
        return answer;
      }) as unknown as typeof app.inject;
      try {
        between = 'theirs';
        const mine = await server.api('PATCH', path, {
          token: caller.token,
          body: { [field]: 'mine' },
          headers: { 'if-match': v1 },
        });
        expectProblem(mine, 412);
        assert.equal((await server.api('GET', path, { token: caller.token })).body[field], 'theirs', 'their write stands');
        const v2 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
        between = 'theirs again';
        expectProblem(await server.api('DELETE', path, { token: caller.token, headers: { 'if-match': v2 } }), 412);
        assert.equal((await server.api('GET', path, { token: caller.token })).body[field], 'theirs again', 'not deleted');
        assert.deepEqual(interleaved, ['theirs', 'theirs again']);
      } finally {
        app.inject = inject;
      }
    });
  }

  // A row lock held by another transaction while a write waits on it: PostgreSQL only (SQLite has no row locks).
  if (kind === 'postgres')
    test('If-Match compares the version in the write itself: a write committed after the check makes it 412', async () => {
      const created = await server.api('POST', '/webhooks', {
        token: caller.token,
        body: { url: 'https://hooks.example.com/d', description: 'v1' },
      });
      const id = created.body.webhookId as string;
      const path = `/webhooks/${id}`;
      const v1 = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
      // Another writer has changed the row and not committed yet: the check still sees v1 (committed), the
      // write waits for the row, and finds another version once that writer commits.
      const other = new pg.Client({ connectionString: server.server.app.config.databaseUrl });
      await other.connect();
      try {
        await other.query('begin');
        await other.query(`update webhooks set description = 'theirs', row_version = row_version + 1 where id = $1`, [id]);
        const mine = server.api('PATCH', path, {
          token: caller.token,
          body: { description: 'mine' },
          headers: { 'if-match': v1 },
        });
        // The If-Match request has passed its check and waits on the row lock.
        for (let i = 0; i < 100; i += 1) {
          const { rows } = await other.query(
            `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like 'update "webhooks"%'`,
          );
          if (rows[0].n > 0) break;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        await other.query('commit');
        expectProblem(await mine, 412);
      } finally {
        await other.end();
      }
      assert.equal((await server.api('GET', path, { token: caller.token })).body.description, 'theirs');
    });

  test('concurrent writes with one If-Match: one wins, the others are 412', async () => {
    const created = await server.api('POST', '/webhooks', { token: caller.token, body: { url: 'https://hooks.example.com/b' } });
    const path = `/webhooks/${created.body.webhookId}`;
    const tag = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        server.api('PATCH', path, { token: caller.token, body: { description: `writer ${i}` }, headers: { 'if-match': tag } }),
      ),
    );
    assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, 412, 412, 412, 412]);
  });

  test('concurrent writes with one If-Match through two server instances: one wins, the others are 412', async () => {
    const beside = await TestServer.startBeside(server);
    try {
      for (const [i, resource] of ['webhook', 'schedule'].entries()) {
        let path: string;
        let body: (n: number) => unknown;
        if (resource === 'webhook') {
          const created = await server.api('POST', '/webhooks', {
            token: caller.token,
            body: { url: `https://hooks.example.com/c${i}` },
          });
          path = `/webhooks/${created.body.webhookId}`;
          body = (n) => ({ description: `writer ${n}` });
        } else {
          const projectId = await server.newProject(caller);
          await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'dev' } });
          const created = await server.api('POST', `/projects/${projectId}/schedules`, {
            token: caller.token,
            body: {
              name: 'nightly',
              cronExpression: '0 3 * * *',
              pipelineName: 'pipelines/daily-load.orch.yaml',
              environmentName: 'dev',
              scheduleEnabled: false,
            },
          });
          assert.equal(created.status, 201, created.text);
          path = `/projects/${projectId}/schedules/${created.body.scheduleId}`;
          body = (n) => ({ name: `nightly ${n}` });
        }
        const tag = (await server.api('GET', path, { token: caller.token })).headers.get('etag')!;
        const answers = await Promise.all(
          Array.from({ length: 6 }, (_, n) =>
            (n % 2 ? server : beside).api('PATCH', path, { token: caller.token, body: body(n), headers: { 'if-match': tag } }),
          ),
        );
        assert.deepEqual(
          answers.map((answer) => answer.status).sort(),
          [200, 412, 412, 412, 412, 412],
          `${resource}: ${answers.map((answer) => answer.text).join('\n')}`,
        );
      }
    } finally {
      await beside.close();
    }
  });
});
