import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';

const MAX = 30;

/** How many answers each operation (path without ids) had. */
function countsOf(answers: Array<{ what: string }>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { what } of answers) {
    const key = what.replace(/[0-9a-f-]{36}/g, '{id}').replace(/\?.*/, '');
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}
const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

/**
 * Failed authentications under load (issue 36: the attack round could not try it). Every failure counts
 * against its address on every door (the API, the agent protocol, hosted Git), exactly `max` of them are
 * answered 401 however many arrive at once, the rest 429 with Retry-After, nothing fails otherwise, and
 * authenticated clients from the same address keep their own budget.
 */
describeEachStore('failed-authentication rate limit under concurrent load', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind, { rateLimitMax: MAX, rateLimitWindowMs: 60_000 });
    caller = await server.newAccount();
  });
  after(() => server.close());

  test(`of ${MAX * 8} bad requests sent 40 at a time, exactly ${MAX} are 401 and the rest 429; valid clients are served`, async () => {
    // A process of its own beside the first: a limiter that has counted nothing from this address yet.
    const guesser = await TestServer.startBeside(server);
    try {
      const forged = `${b64url({ alg: 'RS256', typ: 'JWT', kid: 'guess' })}.${b64url({ sub: 'x', aud: 'x' })}.${'A'.repeat(342)}`;
      const unsigned = `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url({ sub: caller.clientId })}.`;
      const basic = (token: string) => `Basic ${Buffer.from(`git:${token}`).toString('base64')}`;
      const kinds: Array<(i: number) => [string, string, Record<string, string>]> = [
        (i) => ['GET', '/dpc/v1/projects', { authorization: `Bearer not-a-token-${i}` }],
        () => ['POST', '/dpc/v1/projects', { authorization: `Bearer ${forged}`, 'content-type': 'application/json' }],
        () => ['GET', '/dpc/v1/projects', {}],
        () => ['DELETE', `/dpc/v1/projects/${randomUUID()}`, { authorization: `Bearer ${unsigned}` }],
        (i) => ['GET', '/dpc/agent/v1/work', { authorization: `Bearer agent-guess-${i}` }],
        () => ['POST', '/dpc/agent/v1/heartbeat', { authorization: `Bearer ${forged}`, 'content-type': 'application/json' }],
        (i) => ['GET', `/dpc/git/${randomUUID()}.git/info/refs?service=git-upload-pack`, { authorization: basic(`guess-${i}`) }],
        () => ['GET', `/dpc/git/${randomUUID()}.git/info/refs?service=git-receive-pack`, {}],
      ];
      const bad = Array.from({ length: MAX * 8 }, (_, i) => kinds[i % kinds.length](i));
      const statuses: Array<{ what: string; status: number; retryAfter: string | null }> = [];
      const valid: number[] = [];
      for (let start = 0; start < bad.length; start += 40) {
        const batch = bad.slice(start, start + 40).map(async ([method, path, headers]) => {
          const body = headers['content-type'] ? '{"name":"x"}' : undefined;
          const response = await fetch(`${guesser.url}${path}`, { method, headers, body });
          await response.arrayBuffer();
          statuses.push({ what: `${method} ${path}`, status: response.status, retryAfter: response.headers.get('retry-after') });
        });
        // An authenticated client from the same address, amid the storm.
        const served = fetch(`${guesser.url}/dpc/v1/projects`, { headers: { authorization: `Bearer ${caller.token}` } }).then(
          async (response) => {
            await response.arrayBuffer();
            valid.push(response.status);
          },
        );
        await Promise.all([...batch, served]);
      }
      const unexpected = statuses.filter(({ status }) => status !== 401 && status !== 429);
      assert.deepEqual(unexpected, [], 'only 401 and 429');
      const refused = statuses.filter(({ status }) => status === 401);
      assert.equal(refused.length, MAX, `exactly max failures answered 401: ${JSON.stringify(countsOf(refused))}`);
      const limited = statuses.filter(({ status }) => status === 429);
      assert.equal(limited.length, MAX * 7);
      assert.ok(
        limited.every(({ retryAfter }) => Number(retryAfter) > 0),
        'every 429 says when to retry',
      );
      // Every door is limited: the agent protocol and hosted Git as much as the API.
      for (const door of ['/dpc/v1/', '/dpc/agent/v1/', '/dpc/git/']) {
        assert.ok(
          limited.some(({ what }) => what.includes(door)),
          `${door} answers 429 too`,
        );
      }
      assert.ok(valid.length > 0 && valid.every((status) => status === 200), `valid client: ${valid.join(',')}`);
      assert.equal((await fetch(`${guesser.url}/healthz`)).status, 200);
    } finally {
      await guesser.close();
    }
  });
});
