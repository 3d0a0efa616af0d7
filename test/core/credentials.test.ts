import assert from 'node:assert/strict';
import { test } from 'node:test';
import { credentialIn, credentialInNamed, credentialViolations, isCredentialName } from '../../src/core/credentials.ts';

test('credential names: what the attack stored, and names that only look alike', () => {
  const credentials = [
    'password',
    'apikey',
    'api_key',
    'X-API-Key',
    'key',
    'sig',
    'appid',
    'X-Auth-Token',
    'Ocp-Apim-Subscription-Key',
    'access_token',
    'client_secret',
    'sslpassword',
    'trustCertificateKeyStorePassword',
    'oracle.net.wallet_password',
    'user.password',
    'db.pass',
    'SharedAccessKey',
    'AccountKey',
    'PWD',
    'Authorization',
    'Proxy-Authorization',
    'Cookie',
    'passphrase',
    'ＰＡＳＳＷＯＲＤ',
    'private_key',
    'refreshToken',
    'auth',
  ];
  for (const name of credentials) assert.ok(isCredentialName(name), name);
  const plain = [
    'host',
    'snapshot.mode',
    'pageToken',
    'nextToken',
    'tokenCount',
    'token_type',
    'message.key.columns',
    'key.converter',
    'primary.key',
    'bypass',
    'secretName',
    'secretKeyName',
    'username',
    'Accept',
    'X-Request-Id',
    'password.file',
    'sslmode',
  ];
  for (const name of plain) assert.ok(!isCredentialName(name), name);
});

test('credential values: URLs with userinfo or credential parameters, connection strings, authorization schemes, percent-encoded', () => {
  const carrying = [
    'user:hunter2@db.internal',
    'mongodb://u:pw@mongo.internal:27017/app',
    'https://token@github.com/acme/repo.git',
    'jdbc:postgresql://db/x?user=a&p%61ssword=hunter2',
    'jdbc:postgresql://db/x?user=a&p%2561ssword=hunter2',
    'jdbc:sqlserver://db:1433;databaseName=x;user=a;password=hunter2',
    'Driver={ODBC};Server=db;Uid=a;PWD=hunter2;',
    'Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=abc123=',
    'DefaultEndpointsProtocol=https;AccountName=x;AccountKey=abc==;',
    'Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.x',
    'Basic dXNlcjpwYXNzd29yZA==',
    'https://api.example.com/v1/items?api_key=abc123',
    'https://api.example.com/v1/items?token=abc123',
    'https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=abc%2Bdef',
    '{"user": "me", "password": "s3cr3t"}',
    'ghp_0123456789abcdefghijABCDEFGHIJ012345',
    '-----BEGIN RSA PRIVATE KEY-----\nMII...',
  ];
  for (const value of carrying) assert.ok(credentialIn(value), value);
  const harmless = [
    'db.internal',
    'db.internal:5432',
    'initial',
    'https://api.github.com/orgs/{org}/repos',
    'jdbc:postgresql://db/x?sslmode=require',
    '{"pageToken": "abc", "tokenCount": 3}',
    '{"password": "${password}"}',
    'Bearer {{token}}',
    'Bearer ${API_TOKEN}',
    'Basic credentials are sent only over HTTPS',
    'application/json',
    'orders-db',
    'public',
  ];
  for (const value of harmless) assert.equal(credentialIn(value), undefined, value);
  assert.ok(credentialInNamed('X-Custom', 'Bearer abcdef123456'));
  assert.equal(credentialInNamed('X-Auth-Token', '{{token}}'), undefined);
});

test('violations name the field and never the value', () => {
  const violations = credentialViolations(
    { advancedProperties: { apikey: 'v4lue-1', mode: 'initial' }, host: 'u:v4lue-2@db', list: ['Bearer v4lue-3-long'] },
    'body',
    'use a secret reference',
  );
  assert.deepEqual(
    violations.map((v) => v.split(':')[0]),
    ['body.advancedProperties.apikey', 'body.host', 'body.list.0'],
  );
  assert.ok(violations.every((v) => !v.includes('v4lue')));
});

test('long adversarial text is scanned (bounded patterns) and long plain text passes', () => {
  for (const text of [
    'a'.repeat(100_000),
    '=a:'.repeat(30_000),
    '('.repeat(100_000),
    ' a'.repeat(50_000),
    '/a.'.repeat(30_000),
  ]) {
    assert.equal(credentialIn(text), undefined);
  }
  assert.ok(credentialIn(`${'x'.repeat(50_000)} password=hunter2`));
});
