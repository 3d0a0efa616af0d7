import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer } from '../helpers/harness.ts';
import { revokeClient } from '../../src/core/auth/accounts.ts';
import { EventStream } from '../helpers/event-stream.ts';

describeEachStore('client revocation', (kind) => {
  let first: TestServer;
  let second: TestServer;
  before(async () => {
    first = await TestServer.start(kind, { revocationRefreshSeconds: 1 });
    second = await TestServer.startBeside(first);
  });
  after(async () => {
    await second.close();
    await first.close();
  });

  test('a revoked client gets no token, and its tokens stop working on every instance within the refresh bound', async () => {
    const caller = await first.newAccount();
    const other = await first.newAccount();
    // Both instances have verified (and cached) the token before the revocation.
    for (const server of [first, second])
      assert.equal((await server.api('GET', '/projects', { token: caller.token })).status, 200);

    await revokeClient(first.db, caller.clientId);
    const refused = await second.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: caller.clientId,
        client_secret: caller.clientSecret,
      }),
    });
    assert.equal(refused.status, 401);

    await new Promise((resolve) => setTimeout(resolve, 2200));
    for (const server of [first, second]) {
      const answer = await server.api('GET', '/projects', { token: caller.token });
      assert.equal(answer.status, 401);
      assert.match(answer.body.detail, /revoked/);
      assert.equal((await server.api('GET', '/projects', { token: other.token })).status, 200, 'other clients keep working');
    }
  });
  test("a revoked client's open event stream ends, and is sent nothing more (attack finding F11)", async () => {
    const caller = await first.newAccount();
    const stream = await EventStream.open(second.url, caller.token);
    try {
      assert.equal((await first.api('POST', '/projects', { token: caller.token, body: { name: 'before' } })).status, 201);
      const [seen] = await stream.take(1);
      assert.equal(seen.type, 'projects.created');
      await revokeClient(first.db, caller.clientId);
      await new Promise((resolve) => setTimeout(resolve, 2200));
      // Written as the account by a client that is still good: the revoked one's stream must not carry it.
      const other = await first.tokenFor(caller.accountId, 'admin');
      assert.equal((await first.api('POST', '/projects', { token: other, body: { name: 'after' } })).status, 201);
      await assert.rejects(stream.take(2, 5000), /the stream ended after 1 of 2 events/);
    } finally {
      stream.close();
    }
  });
});
