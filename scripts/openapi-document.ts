// Prints the served OpenAPI document without listening: the app is built over a scratch SQLite store.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadConfig } from '../src/core/config.ts';
import { migrate, openStore } from '../src/core/db/database.ts';
import { buildApp } from '../src/app.ts';

const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-openapi-'));
const config = { ...loadConfig({}), dataDir, databaseUrl: undefined };
const store = openStore(config);
try {
  await migrate(store);
  const app = await buildApp({ config, store, logger: false });
  await app.ready();
  process.stdout.write(JSON.stringify(app.swagger(), null, 2) + '\n');
  await app.close();
} finally {
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
}
