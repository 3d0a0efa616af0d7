// Runs every test file under test/ with node's own test runner, TypeScript through tsx.
// (Node 20's --test takes no glob patterns, so the files are listed here.)
import { spawn } from 'node:child_process';
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
// The output passes through as it comes; skipped PostgreSQL suites are counted so that the closing
// lines say how many were skipped and why, where the runner's own summary would hide them.
const SKIPPED_SUITE = /\[postgres\].*# TEST_DATABASE_URL is not set/;
let skippedSuites = 0;
let pending = '';
const runner = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-concurrency=2', '--test-reporter=spec', ...files], {
  stdio: ['ignore', 'pipe', 'inherit'],
});
runner.stdout.on('data', (chunk) => {
  process.stdout.write(chunk);
  const lines = (pending + chunk).split('\n');
  pending = lines.pop();
  skippedSuites += lines.filter((line) => SKIPPED_SUITE.test(line)).length;
});
runner.on('close', (code) => {
  if (SKIPPED_SUITE.test(pending)) skippedSuites += 1;
  if (skippedSuites > 0) {
    console.log(
      `# ${skippedSuites} PostgreSQL suites SKIPPED: TEST_DATABASE_URL is not set (set it to a server whose role may create databases; CI does)`,
    );
  }
  process.exit(code ?? 1);
});
