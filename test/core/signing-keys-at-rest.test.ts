import assert from 'node:assert/strict';
import { exportJWK, generateKeyPair } from 'jose';
import { after, before, test } from 'node:test';
import { newEncryptionKey, parseEncryptionKey } from '../../src/core/secret-box.ts';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('signing keys at rest', (kind) => {
  const [oldKey, newKey] = [newEncryptionKey(), newEncryptionKey()].map(parseEncryptionKey);
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind, { encryptionKeys: [oldKey] });
    caller = await server.newAccount();
  });
  after(() => server.close());

  const storedKeys = () => server.db.selectFrom('signingKeys').select(['kid', 'privateJwk']).execute();

  test('the private key is stored sealed: no JWK, no private component in the store', async () => {
    for (const { privateJwk } of await storedKeys()) {
      assert.ok(privateJwk.startsWith('v1.'), privateJwk.slice(0, 12));
      assert.ok(!privateJwk.includes('"d"'));
    }
  });

  test('a key stored in plain text before sealing is sealed at its first use, and still signs', async () => {
    const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
    const kid = 'legacy-plain-key';
    await server.db.updateTable('signingKeys').set({ retiredAt: new Date().toISOString() }).execute();
    await server.db
      .insertInto('signingKeys')
      .values({
        kid,
        privateJwk: JSON.stringify(await exportJWK(privateKey)),
        publicJwk: JSON.stringify({ ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' }),
        createdAt: new Date(Date.now() + 1000).toISOString(),
        retiredAt: null,
      })
      .execute();
    const token = await server.token(caller.clientId, caller.clientSecret);
    assert.equal(JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString()).kid, kid);
    assert.equal((await server.api('GET', '/projects', { token })).status, 200);
    const stored = (await storedKeys()).find((row) => row.kid === kid)!;
    assert.ok(stored.privateJwk.startsWith('v1.'));
  });

  test('rotating the encryption key: a new first key opens the old seals, reseal moves them, the old key can go', async () => {
    const before = await server.token(caller.clientId, caller.clientSecret);
    const rotated = await TestServer.startBeside(server, { encryptionKeys: [newKey, oldKey] });
    try {
      assert.equal(
        (await rotated.api('GET', '/projects', { token: await rotated.token(caller.clientId, caller.clientSecret) })).status,
        200,
      );
      assert.ok((await rotated.server.app.tokens.keys.reseal()) > 0);
      assert.equal(await rotated.server.app.tokens.keys.reseal(), 0, 'nothing is left stale');
    } finally {
      await rotated.close();
    }
    const newOnly = await TestServer.startBeside(server, { encryptionKeys: [newKey] });
    try {
      assert.equal((await newOnly.api('GET', '/projects', { token: before })).status, 200);
      assert.equal(
        (await newOnly.api('GET', '/projects', { token: await newOnly.token(caller.clientId, caller.clientSecret) })).status,
        200,
      );
    } finally {
      await newOnly.close();
    }
  });
});
