import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { LocalFileVault, SecretExists } from '../../src/agent/vault.ts';

/**
 * Secret names and keys are chosen by users. Names every object answers to (`__proto__`, `constructor`,
 * `toString`, ...) are secrets like any other: they land in the vault, read back, and leave
 * Object.prototype and other secrets alone (issue 36).
 */
describe('the local file vault with names objects reserve', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-vault-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const RESERVED = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf'];

  test('each is written, read back from the file, and pollutes nothing', async () => {
    const file = path.join(dir, 'vault.json');
    const vault = new LocalFileVault(file);
    for (const name of RESERVED) {
      const written = await vault.write(name, 'prefixText', `value of ${name}`, { overwrite: false });
      assert.equal(written.vaultSecretName, name);
      await vault.write('ordinary', name, `key ${name}`, { overwrite: false });
    }
    const probe: Record<string, unknown> = {};
    assert.equal(probe.prefixText, undefined, 'Object.prototype was written to');
    assert.equal(Object.getPrototypeOf(probe), Object.prototype);
    assert.equal(typeof probe.toString, 'function');

    const reopened = new LocalFileVault(file);
    for (const name of RESERVED) {
      assert.equal(await reopened.read(name, 'prefixText'), `value of ${name}`, name);
      assert.equal(await reopened.read('ordinary', name), `key ${name}`, name);
    }
    const stored = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    for (const name of RESERVED) assert.ok(Object.hasOwn(stored, name), `${name} is in the file`);
  });

  test('a key or a secret that does not exist reads undefined, and a new one is no conflict', async () => {
    const vault = new LocalFileVault(path.join(dir, 'fresh.json'));
    await vault.write('warehouse', 'login', 'x', { overwrite: false });
    for (const name of RESERVED) {
      assert.equal(await vault.read(name, 'value'), undefined, `secret ${name}`);
      assert.equal(await vault.read('warehouse', name), undefined, `key ${name}`);
    }
    // constructor/toString as a key of an existing secret is not "already there".
    await vault.write('warehouse', 'toString', 'y', { overwrite: false });
    await vault.write('warehouse', 'constructor', 'z', { overwrite: false });
    await assert.rejects(vault.write('warehouse', 'toString', 'again', { overwrite: false }), SecretExists);
    await vault.write('warehouse', 'toString', 'again', { overwrite: true });
    assert.equal(await vault.read('warehouse', 'toString'), 'again');
  });
});
