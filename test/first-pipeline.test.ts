/**
 * The README's first pipeline, run as a user would paste it: `examples/first-pipeline.sh` starts the
 * server, publishes examples/ with `dpc publish`, runs its pipeline on the platform-hosted agent (the
 * embedded DuckDB warehouse: nothing else installed), follows it to SUCCESS, prints its steps with the
 * mart's row count, and runs the example's test pipeline on the mart.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { describeEachStore, scratchStore } from './helpers/harness.ts';
import { freePort, runDpc } from './helpers/processes.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

describeEachStore('the first pipeline of the README, as the script the README pastes', (kind) => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    env = {
      ...process.env,
      DPC_DATA_DIR: scratch.settings.dataDir ?? '',
      DATABASE_URL: scratch.settings.databaseUrl ?? '',
      DPC_ENCRYPTION_KEYS: Buffer.alloc(32, 9).toString('base64'),
      PORT: String(await freePort()),
      TMPDIR: tmpdir(),
    };
  });
  after(() => drop());

  test('examples/first-pipeline.sh: publish, run to SUCCESS, the mart row count, the test pipeline passes', async () => {
    // Its own process group: the server it starts in the background ends with it.
    const script = spawn('bash', [path.join(ROOT, 'examples/first-pipeline.sh')], {
      cwd: ROOT,
      env,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    script.stdout.on('data', (chunk) => (output += chunk));
    script.stderr.on('data', (chunk) => (output += chunk));
    try {
      const code = await new Promise<number | null>((resolve) => script.once('exit', resolve));
      assert.equal(code, 0, output);
    } finally {
      try {
        process.kill(-script.pid!, 'SIGTERM');
      } catch {
        // already gone
      }
    }
    assert.match(output, /^pipeline: SUCCESS$/m, output);
    assert.match(output, /^Count mart rows +SUCCESS +mart_rows=200$/m, output);
    assert.match(output, /^Write mart +SUCCESS +rewrite-table wrote/m, output);
    assert.match(output, /^tests: SUCCESS$/m, output);
  });

  test('dpc pipeline sql prints the statement the transformation runs, quoted for the dialect', () => {
    const file = path.join(ROOT, 'examples/pipelines/sales-mart.tran.yaml');
    const duck = runDpc(['pipeline', 'sql', file], env);
    assert.equal(duck.status, 0, duck.stderr);
    assert.match(
      duck.stdout,
      /^-- Write mart \(rewrite-table\)\nCREATE OR REPLACE TABLE "mart_sales_by_customer" AS WITH "Orders" AS/,
    );
    const postgres = runDpc(['pipeline', 'sql', file, '--dialect', 'postgres', '--variable', "order_status=o'brien"], env);
    assert.equal(postgres.status, 0, postgres.stderr);
    assert.match(
      postgres.stdout,
      /^DROP TABLE IF EXISTS "mart_sales_by_customer";\nCREATE TABLE "mart_sales_by_customer" AS WITH/m,
    );
    assert.match(postgres.stdout, /"status" = 'o''brien'/);
  });
});
