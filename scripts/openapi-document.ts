// Writes the served OpenAPI document to the file named as the argument (else prints it), without listening:
// the app is built over a scratch SQLite store.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
  const text = JSON.stringify(app.swagger(), null, 2) + '\n';
  if (process.argv[2]) writeFileSync(process.argv[2], text);
  else process.stdout.write(text);
  await app.close();
} finally {
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
}
