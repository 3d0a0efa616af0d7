import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { keyOf, tokenAfter } from '../../src/core/token-paging.ts';

/** Pages in the second half of a list are read backwards from its end (src/core/paging.ts pageWindow). */
describeEachStore('paging from either end', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  const names = Array.from({ length: 7 }, (_, i) => `env-${i}`);
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    for (const name of [...names].reverse()) {
      const created = await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name } });
      assert.equal(created.status, 201);
      await server.api('POST', `/projects/${projectId}/variables`, {
        token: caller.token,
        body: { name: name.replace('-', '_'), type: 'TEXT', behaviour: 'SHARED', value: name },
      });
    }
  });
  after(() => server.close());

  for (const [list, expected] of [
    ['environments', names],
    ['variables', names.map((name) => name.replace('-', '_'))],
  ] as const) {
    test(`every page of ${list}, from the front or the back, joins into the list in name order`, async () => {
      for (const size of [1, 2, 3, 6, 7, 100]) {
        const seen: string[] = [];
        for (let page = 0; page * size < expected.length; page += 1) {
          const answer = await server.api('GET', `/projects/${projectId}/${list}?page=${page}&size=${size}`, {
            token: caller.token,
          });
          assert.equal(answer.status, 200);
          assert.deepEqual([answer.body.page, answer.body.size, answer.body.total], [page, size, expected.length]);
          seen.push(...answer.body.results.map((item: { name: string }) => item.name));
        }
        assert.deepEqual(seen, expected, `size ${size}`);
        const past = await server.api('GET', `/projects/${projectId}/${list}?page=${Math.ceil(7 / size)}&size=${size}`, {
          token: caller.token,
        });
        assert.deepEqual([past.body.results, past.body.total], [[], expected.length]);
      }
    });
  }

  test('an empty list, a page far past the end, and another account: each answered as itself', async () => {
    const empty = await server.newProject(caller);
    for (const list of ['environments', 'variables']) {
      for (const page of [0, 1, 11]) {
        // page 11 of 100 starts past the first 1,000 items: the two-statement path on PostgreSQL too.
        const answer = await server.api('GET', `/projects/${empty}/${list}?page=${page}&size=100`, { token: caller.token });
        assert.deepEqual(answer.body, { page, size: 100, total: 0, results: [] });
        const full = await server.api('GET', `/projects/${projectId}/${list}?page=${page}&size=100`, { token: caller.token });
        assert.equal(full.body.total, 7);
      }
      const stranger = await server.newAccount();
      for (const page of [0, 11]) {
        const answer = await server.api('GET', `/projects/${projectId}/${list}?page=${page}&size=100`, { token: stranger.token });
        assert.equal(answer.status, 404);
      }
    }
  });

  test('projects of the account, from the front or the back', async () => {
    for (let i = 0; i < 4; i += 1) await server.newProject(caller);
    const all = await server.api('GET', '/projects?size=100', { token: caller.token });
    const seen: string[] = [];
    for (let page = 0; page < all.body.total; page += 1)
      seen.push((await server.api('GET', `/projects?page=${page}&size=1`, { token: caller.token })).body.results[0].name);
    assert.deepEqual(
      seen,
      all.body.results.map((project: { name: string }) => project.name),
    );
  });
});

test('page tokens carry the sort key of the last item; a token of another shape, or altered, is a 400 naming paginationToken', () => {
  const token = tokenAfter(['2026-11-25T08:00:00.000Z', 'b1']);
  assert.deepEqual(keyOf<[string, string]>(token, ['string', 'string']), ['2026-11-25T08:00:00.000Z', 'b1']);
  assert.equal(keyOf<[number]>(undefined, ['number']), undefined);
  assert.deepEqual(keyOf<[number]>(tokenAfter([42]), ['number']), [42]);
  for (const bad of [
    'nonsense',
    tokenAfter([42]),
    tokenAfter(['a', 7]),
    tokenAfter([1.5]),
    Buffer.from('{"a":1}').toString('base64url'),
    `${token}=`,
  ]) {
    assert.throws(
      () => keyOf<[string, string]>(bad, ['string', 'string']),
      (error: { status?: number; options?: { violations?: string[] } }) =>
        error.status === 400 && error.options?.violations?.[0]?.startsWith('paginationToken:') === true,
      bad,
    );
  }
  assert.throws(() => keyOf<[number]>(tokenAfter([1.5]), ['number']), /paginationToken/);
});
