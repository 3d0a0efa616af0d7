import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { SignJWT, generateKeyPair, decodeJwt, decodeProtectedHeader } from 'jose';
import { newClientSecret } from '../../src/core/auth/secrets.ts';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

function base64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

describeEachStore('identity and access', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
  });
  after(() => server.close());

  test('the client-credentials grant answers a 30-minute bearer JWT with a kid', async () => {
    const answer = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: caller.clientId,
        client_secret: caller.clientSecret,
        audience: server.config.audience,
      }),
    });
    assert.equal(answer.status, 200);
    assert.equal(answer.body.token_type, 'Bearer');
    assert.equal(answer.body.expires_in, 1800);
    assert.equal(answer.headers.get('cache-control'), 'no-store');
    const header = decodeProtectedHeader(answer.body.access_token);
    assert.equal(header.alg, 'ES256');
    const claims = decodeJwt(answer.body.access_token);
    assert.equal(claims.sub, caller.clientId);
    assert.equal(claims.exp! - claims.iat!, 1800);
    const jwks = await server.request('GET', '/.well-known/jwks.json');
    assert.ok(jwks.body.keys.some((key: { kid: string }) => key.kid === header.kid));
    assert.ok(
      jwks.body.keys.every((key: Record<string, unknown>) => !('d' in key)),
      'no private key material',
    );
  });

  test('HTTP Basic client authentication is accepted too', async () => {
    const basic = Buffer.from(`${caller.clientId}:${caller.clientSecret}`).toString('base64');
    const answer = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({ grant_type: 'client_credentials' }),
      headers: { authorization: `Basic ${basic}` },
    });
    assert.equal(answer.status, 200);
  });

  test('wrong credentials and other grants get RFC 6749 errors', async () => {
    const wrong = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: caller.clientId, client_secret: 'nope' }),
    });
    assert.equal(wrong.status, 401);
    assert.equal(wrong.body.error, 'invalid_client');
    const unknown = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: 'who', client_secret: 'nope' }),
    });
    assert.equal(unknown.status, 401);
    assert.equal(unknown.body.error, 'invalid_client');
    const grant = await server.request('POST', '/oauth/dpc/token', { body: new URLSearchParams({ grant_type: 'password' }) });
    assert.equal(grant.status, 400);
    assert.equal(grant.body.error, 'unsupported_grant_type');
    const empty = await server.request('POST', '/oauth/dpc/token');
    assert.equal(empty.status, 400);
    assert.equal(empty.body.error, 'invalid_request');
    const audience = await server.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: caller.clientId,
        client_secret: caller.clientSecret,
        audience: 'other',
      }),
    });
    assert.equal(audience.status, 400);
    assert.equal(audience.body.error, 'invalid_target');
  });

  test('malformed client credentials are invalid_request, never a 500 (form, JSON, HTTP Basic, NUL)', async () => {
    const token = (body: unknown, headers: Record<string, string> = {}) =>
      server.request('POST', '/oauth/dpc/token', { body, headers });
    const expectOAuthError = (answer: { status: number; body: { error: string } }, status: number, error: string) => {
      assert.equal(answer.status, status, JSON.stringify(answer.body));
      assert.equal(answer.body.error, error);
    };
    for (const odd of [{ x: 1 }, 42, ['a', 'b'], null, true]) {
      expectOAuthError(
        await token({ grant_type: 'client_credentials', client_id: caller.clientId, client_secret: odd }),
        400,
        'invalid_request',
      );
      expectOAuthError(
        await token({ grant_type: 'client_credentials', client_id: odd, client_secret: 'x' }),
        400,
        'invalid_request',
      );
    }
    const form = (fields: Record<string, string>) => new URLSearchParams({ grant_type: 'client_credentials', ...fields });
    expectOAuthError(await token(form({ client_id: 'who\u0000', client_secret: 'x' })), 400, 'invalid_request');
    for (const basic of ['%zz:secret', `${caller.clientId}:%E0%A4%A`, 'who%00:x']) {
      const authorization = `Basic ${Buffer.from(basic).toString('base64')}`;
      expectOAuthError(await token(form({}), { authorization }), 400, 'invalid_request');
    }
    // Percent-encoded Basic credentials (RFC 6749 2.3.1) still work.
    const encoded = Buffer.from(`${encodeURIComponent(caller.clientId)}:${encodeURIComponent(caller.clientSecret)}`).toString(
      'base64',
    );
    assert.equal((await token(form({}), { authorization: `Basic ${encoded}` })).status, 200);
  });

  test('client secrets are stored only as salted scrypt hashes', async () => {
    const row = await server.db
      .selectFrom('apiClients')
      .select('secretHash')
      .where('id', '=', caller.clientId)
      .executeTakeFirstOrThrow();
    assert.match(row.secretHash, /^scrypt\$/);
    assert.ok(!row.secretHash.includes(caller.clientSecret));
  });

  test('a client secret never starts with "-" (a command line would take it for an option)', () => {
    // 1 in 64 base64url strings starts with "-": among 5,000, some would.
    const secrets = Array.from({ length: 5000 }, newClientSecret);
    assert.ok(secrets.every((secret) => /^[A-Za-z0-9_][A-Za-z0-9_-]{42}$/.test(secret)));
    assert.equal(new Set(secrets).size, secrets.length);
  });

  test('missing, malformed, expired, forged, alg none and foreign-key tokens: 401 with WWW-Authenticate', async () => {
    const claims = decodeJwt(caller.token);
    const header = decodeProtectedHeader(caller.token);
    const [h, p, s] = caller.token.split('.');
    const foreign = await generateKeyPair('ES256');
    const now = Math.floor(Date.now() / 1000);
    const signWith = (key: CryptoKey, extra: Record<string, unknown>, kid = header.kid) =>
      new SignJWT({ ...claims, ...extra }).setProtectedHeader({ alg: 'ES256', kid }).sign(key);
    const { key: realKey } = await server.server.app.tokens.keys.signingKey();
    const candidates: Record<string, string | undefined> = {
      missing: undefined,
      malformed: 'not-a-jwt',
      'tampered payload': `${h}.${base64url({ ...claims, role: 'admin', account_id: 'other' })}.${s}`,
      'alg none': `${base64url({ alg: 'none', typ: 'JWT' })}.${p}.`,
      'HS256 with the public key as secret': `${base64url({ alg: 'HS256', kid: header.kid })}.${p}.${s}`,
      'signed by a foreign key': await signWith(foreign.privateKey, {}),
      'unknown kid': await signWith(foreign.privateKey, {}, 'no-such-kid'),
      expired: await signWith(realKey, { iat: now - 4000, nbf: now - 4000, exp: now - 100 }),
      'not yet valid': await signWith(realKey, { nbf: now + 600, exp: now + 1200 }),
      'wrong issuer': await signWith(realKey, { iss: 'someone-else' }),
      'wrong audience': await signWith(realKey, { aud: 'someone-else' }),
    };
    for (const [name, token] of Object.entries(candidates)) {
      const answer = await server.api(
        'GET',
        '/projects',
        token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } },
      );
      expectProblem(answer, 401, 'unauthorized');
      assert.match(answer.headers.get('www-authenticate') ?? '', /^Bearer/, name);
    }
    const basicScheme = await server.api('GET', '/projects', { headers: { authorization: `Basic ${caller.token}` } });
    expectProblem(basicScheme, 401, 'unauthorized');
  });

  test('an account-id header must match the token', async () => {
    assert.equal(
      (await server.api('GET', '/projects', { token: caller.token, headers: { 'account-id': caller.accountId } })).status,
      200,
    );
    const answer = await server.api('GET', '/projects', { token: caller.token, headers: { 'account-id': 'someone-else' } });
    expectProblem(answer, 403, 'forbidden');
  });

  test('roles: viewer reads, developer writes, only admin deletes projects', async () => {
    const { caller, viewer, developer, projectId } = await server.prologue();
    assert.equal((await server.api('GET', `/projects/${projectId}`, { token: viewer })).status, 200);
    expectProblem(await server.api('POST', '/projects', { token: viewer, body: { name: 'by viewer' } }), 403, 'forbidden');
    expectProblem(
      await server.api('POST', `/projects/${projectId}/environments`, { token: viewer, body: { name: 'dev' } }),
      403,
      'forbidden',
    );
    assert.equal(
      (await server.api('POST', `/projects/${projectId}/environments`, { token: developer, body: { name: 'dev' } })).status,
      201,
    );
    expectProblem(await server.api('DELETE', `/projects/${projectId}`, { token: developer }), 403, 'forbidden');
    assert.equal((await server.api('DELETE', `/projects/${projectId}`, { token: caller.token })).status, 204);
  });

  test('key rotation: new tokens use the new key, old tokens stay valid', async () => {
    const oldToken = await server.token(caller.clientId, caller.clientSecret);
    const { kid } = await server.server.app.tokens.keys.rotate();
    const newToken = await server.token(caller.clientId, caller.clientSecret);
    assert.equal(decodeProtectedHeader(newToken).kid, kid);
    assert.notEqual(decodeProtectedHeader(oldToken).kid, kid);
    assert.equal((await server.api('GET', '/projects', { token: oldToken })).status, 200);
    assert.equal((await server.api('GET', '/projects', { token: newToken })).status, 200);
    const jwks = await server.request('GET', '/.well-known/jwks.json');
    assert.ok(jwks.body.keys.length >= 2);
  });
});
