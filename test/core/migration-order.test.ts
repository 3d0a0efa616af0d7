import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Migrator } from 'kysely';
import { migrate, openStore, pendingMigrations } from '../../src/core/db/database.ts';
import { migrationsFor } from '../../src/core/db/migrations/index.ts';

test('a migration with a lower number than one already run is still applied (numbers land out of order)', async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-migrations-'));
  const store = openStore({ dataDir, databaseUrl: undefined });
  t.after(async () => {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  // A store migrated by a release that had 0009 but not yet 0008.
  const { '0008_scim': _later, ...earlier } = migrationsFor('sqlite');
  const first = await new Migrator({ db: store.db, provider: { getMigrations: async () => earlier } }).migrateToLatest();
  assert.equal(first.error, undefined);
  assert.deepEqual(await pendingMigrations(store), ['0008_scim']);
  assert.deepEqual(await migrate(store), ['0008_scim']);
  assert.deepEqual(await pendingMigrations(store), []);
});
