// Runs every test file under test/ with node's own test runner, TypeScript through tsx.
// (Node 20's --test takes no glob patterns, so the files are listed here.)
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';

function testFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return testFiles(full);
    return entry.name.endsWith('.test.ts') ? [full] : [];
  });
}

const only = process.argv.slice(2);
const files = only.length > 0 ? only : testFiles('test').sort();
if (!process.env.TEST_DATABASE_URL) {
  console.log('# TEST_DATABASE_URL is not set: every PostgreSQL test is SKIPPED (SQLite only).');
}
const result = spawnSync(
  process.execPath,
  ['--import', 'tsx', '--test', '--test-concurrency=2', '--test-reporter=spec', ...files],
  { stdio: 'inherit' },
);
process.exit(result.status ?? 1);
