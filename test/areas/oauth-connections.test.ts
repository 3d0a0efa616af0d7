import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { oauthConnectionBody } from '../helpers/oauth.ts';

describeEachStore('OAuth connections', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let developer: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, developer } = await server.prologue({ project: false }));
  });
  after(() => server.close());

  const create = (body: unknown, token = caller.token) => server.api('POST', '/oauth-connections', { token, body });

  test('created connections are listed oldest first, authorized or pending setup, holding only secret references', async () => {
    const names = ['zeta', 'alpha', 'mid'];
    for (const [i, name] of names.entries()) {
      const answer = await create(oauthConnectionBody(name, i !== 1));
      assert.equal(answer.status, 201, answer.text);
    }
    const list = await server.api('GET', '/oauth-connections', { token: caller.token });
    assert.equal(list.status, 200);
    assert.deepEqual(
      list.body.map((c: { name: string }) => c.name),
      names,
    );
    assert.deepEqual(
      list.body.map((c: { status: string }) => c.status),
      ['AUTHORIZED', 'PENDING_SETUP', 'AUTHORIZED'],
    );
    const [zeta] = list.body;
    assert.deepEqual(zeta.clientSecret, { secretName: 'oauth-apps', secretKey: 'zeta' });
    assert.deepEqual(zeta.tokens, { secretName: 'tokens-zeta' });
    assert.deepEqual((await server.api('GET', `/oauth-connections/${zeta.id}`, { token: caller.token })).body, zeta);
  });

  test('setting a pending connection up authorizes it', async () => {
    const pending = (await create(oauthConnectionBody('to set up', false))).body;
    assert.equal(pending.status, 'PENDING_SETUP');
    const answer = await server.api('POST', `/oauth-connections/${pending.id}/setup`, {
      token: caller.token,
      body: { tokens: { secretName: 'new-tokens' } },
    });
    assert.equal(answer.status, 200);
    assert.equal(answer.body.status, 'AUTHORIZED');
    assert.deepEqual(answer.body.tokens, { secretName: 'new-tokens' });
  });

  test('a name is unique in the account (409); the body is validated (400)', async () => {
    await create(oauthConnectionBody('unique'));
    expectProblem(await create(oauthConnectionBody('unique')), 409, 'conflict');
    const problem = expectProblem(
      await create({ name: '', grantType: 'PASSWORD', clientId: 'x', clientSecret: { secretName: '' } }),
      400,
    );
    const fields = problem.violations!.map((v) => v.split(':')[0]);
    for (const field of ['body.name', 'body.grantType', 'body.clientSecret.secretName', 'body.tokenUrl'])
      assert.ok(fields.includes(field), field);
  });

  test('a token or authorization URL carrying a credential is refused, naming the field, never echoing it (issue 36)', async () => {
    for (const [change, field] of [
      [{ tokenUrl: 'https://login.example.com/token?client_secret=leak-A-value' }, 'body.tokenUrl'],
      [{ tokenUrl: 'https://app:leak-B-value@login.example.com/token' }, 'body.tokenUrl'],
      [{ authorizationUrl: 'https://login.example.com/authorize?api_key=leak-C-value' }, 'body.authorizationUrl'],
    ] as const) {
      const answer = await create({ ...oauthConnectionBody(`leaky ${field}`), ...change });
      const problem = expectProblem(answer, 400);
      assert.deepEqual(
        problem.violations!.map((v) => v.split(':')[0]),
        [field],
      );
      assert.ok(!answer.text.includes('leak-'), 'not echoed');
    }
  });

  test('delete needs an explicit confirmation; without it nothing is deleted and the problem says how', async () => {
    const { id } = (await create(oauthConnectionBody('to delete'))).body;
    for (const query of ['', '?confirm=false']) {
      const problem = expectProblem(
        await server.api('DELETE', `/oauth-connections/${id}${query}`, { token: caller.token }),
        400,
        'bad-request',
      );
      assert.match(problem.detail, /confirm=true/);
      assert.deepEqual(problem.violations, ['confirm: must be true to delete an OAuth connection']);
    }
    assert.equal((await server.api('GET', `/oauth-connections/${id}`, { token: caller.token })).status, 200);
    assert.equal((await server.api('DELETE', `/oauth-connections/${id}?confirm=true`, { token: caller.token })).status, 204);
    expectProblem(await server.api('GET', `/oauth-connections/${id}`, { token: caller.token }), 404);
    expectProblem(await server.api('DELETE', `/oauth-connections/${id}?confirm=true`, { token: caller.token }), 404);
  });

  test("another account's connections answer 404 and are not listed", async () => {
    const { id } = (await create(oauthConnectionBody('mine'))).body;
    const stranger = await server.newAccount('stranger');
    assert.deepEqual((await server.api('GET', '/oauth-connections', { token: stranger.token })).body, []);
    expectProblem(await server.api('GET', `/oauth-connections/${id}`, { token: stranger.token }), 404);
    expectProblem(
      await server.api('POST', `/oauth-connections/${id}/setup`, {
        token: stranger.token,
        body: { tokens: { secretName: 'x' } },
      }),
      404,
    );
    expectProblem(await server.api('DELETE', `/oauth-connections/${id}?confirm=true`, { token: stranger.token }), 404);
    assert.equal((await server.api('GET', `/oauth-connections/${id}`, { token: caller.token })).status, 200);
  });

  test('roles: viewers read, developers write', async () => {
    assert.equal((await server.api('GET', '/oauth-connections', { token: viewer })).status, 200);
    expectProblem(await create(oauthConnectionBody('by viewer'), viewer), 403, 'forbidden');
    const { id } = (await create(oauthConnectionBody('by developer'), developer)).body;
    expectProblem(await server.api('DELETE', `/oauth-connections/${id}?confirm=true`, { token: viewer }), 403);
    assert.equal((await server.api('DELETE', `/oauth-connections/${id}?confirm=true`, { token: developer })).status, 204);
  });
});
