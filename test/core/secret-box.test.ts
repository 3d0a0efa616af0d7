import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { KEY_FILE_NAME, newEncryptionKey, parseEncryptionKey, SecretBox } from '../../src/core/secret-box.ts';
import { loadConfig } from '../../src/core/config.ts';

test('a sealed value opens with its context only, and holds no plaintext', () => {
  const box = new SecretBox([parseEncryptionKey(newEncryptionKey())]);
  const sealed = box.seal('hunter2-secret', 'signing-keys:k1');
  assert.ok(!sealed.includes('hunter2'));
  assert.notEqual(sealed, box.seal('hunter2-secret', 'signing-keys:k1'), 'a fresh IV every time');
  assert.equal(box.open(sealed, 'signing-keys:k1'), 'hunter2-secret');
  assert.throws(() => box.open(sealed, 'signing-keys:k2'));
  const at = sealed.length - 10;
  const tampered = sealed.slice(0, at) + (sealed[at] === 'A' ? 'B' : 'A') + sealed.slice(at + 1);
  assert.throws(() => box.open(tampered, 'signing-keys:k1'));
});

test('rotation: a new first key seals, the old key still opens, and stale values are told apart', () => {
  const [oldKey, newKey] = [newEncryptionKey(), newEncryptionKey()];
  const before = new SecretBox([parseEncryptionKey(oldKey)]);
  const sealed = before.seal('value', 'ctx');
  const after = new SecretBox([parseEncryptionKey(newKey), parseEncryptionKey(oldKey)]);
  assert.equal(after.open(sealed, 'ctx'), 'value');
  assert.ok(after.isStale(sealed));
  assert.ok(!after.isStale(after.seal('value', 'ctx')));
  assert.throws(() => new SecretBox([parseEncryptionKey(newKey)]).open(sealed, 'ctx'), /not configured/);
});

test('without configured keys, a key file is made in the data folder (owner only) and kept', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-box-'));
  try {
    const first = SecretBox.fromConfig({ dataDir, encryptionKeys: [] });
    const file = path.join(dataDir, KEY_FILE_NAME);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const sealed = first.seal('v', 'c');
    assert.equal(SecretBox.fromConfig({ dataDir, encryptionKeys: [] }).open(sealed, 'c'), 'v');
    assert.equal(parseEncryptionKey(readFileSync(file, 'utf8')).length, 32);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('DPC_ENCRYPTION_KEYS must hold 32-byte base64 keys', () => {
  assert.equal(loadConfig({ DPC_ENCRYPTION_KEYS: `${newEncryptionKey()}, ${newEncryptionKey()}` }).encryptionKeys.length, 2);
  assert.throws(() => loadConfig({ DPC_ENCRYPTION_KEYS: 'c2hvcnQ=' }), /DPC_ENCRYPTION_KEYS: key 1: .*32 bytes/);
});
