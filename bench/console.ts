/**
 * The console's run page with 10,000 runs in the account: from the moment the page is asked for a run (its
 * address set) until its status and all 20 steps of its timeline are drawn, in Debian's Chromium (headless,
 * playwright-core) against the real server, on SQLite and (BENCH_POSTGRES_URL) PostgreSQL. The baseline in
 * the same run is the same page of the same run before the 10,000 others were added; the runs list's first
 * render is measured beside it. Target: the run page's first render ≤ 1 s with 10,000 runs (the median of
 * renders, each the first of the run in a page just signed in); the console's files ≤ 300 KB gzipped.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chromium, type Page } from 'playwright-core';
import { loadConfig } from '../src/core/config.ts';
import { openStore } from '../src/core/db/database.ts';
import { consoleAssets } from '../src/areas/console/routes.ts';
import { dpcJson, median, record, startBenchServer, type BenchServer } from './lib.ts';

const RUNS = Number(process.env.BENCH_CONSOLE_RUNS ?? 10_000);
const STEPS = 20;
const RENDERS = Number(process.env.BENCH_ROUNDS ?? 5) * 2;

/** Runs (and, for the first, its steps) written straight into the server's store, as finished runs look. */
async function addRuns(server: BenchServer, accountId: string, projectId: string, count: number, steps: number) {
  const store = openStore({ ...loadConfig({}), dataDir: server.dataDir, databaseUrl: server.databaseUrl });
  const ids: string[] = [];
  try {
    const { id: environmentId } = await store.db
      .selectFrom('environments')
      .select('id')
      .where('projectId', '=', projectId)
      .executeTakeFirstOrThrow();
    const started = Date.now() - count * 60_000;
    for (let from = 0; from < count; from += 500) {
      const rows = Array.from({ length: Math.min(500, count - from) }, (_, i) => {
        const at = started + (from + i) * 60_000;
        const id = randomUUID();
        ids.push(id);
        return {
          id,
          accountId,
          projectId,
          environmentId,
          environmentName: 'prod',
          kind: 'PIPELINE',
          pipelineName: `pipelines/load-${(from + i) % 40}.orch.yaml`,
          testScope: null,
          testName: null,
          versionName: 'v1',
          agentId: randomUUID(),
          agentWorkId: null,
          executionTag: null,
          runningTag: null,
          trigger: (from + i) % 3 === 0 ? 'SCHEDULE' : 'API',
          scheduleId: null,
          scheduledFor: null,
          status: (from + i) % 10 === 0 ? 'FAILED' : 'SUCCESS',
          message: null,
          variables: '{}',
          startedAt: new Date(at).toISOString(),
          finishedAt: new Date(at + 30_000).toISOString(),
          lastReportAt: null,
        };
      });
      await store.db.insertInto('executions').values(rows).execute();
    }
    const stepRows = Array.from({ length: steps }, (_, position) => ({
      executionId: ids[0],
      position,
      name: `Step ${position + 1}`,
      status: 'SUCCESS',
      startedAt: new Date(started + position * 1000).toISOString(),
      finishedAt: new Date(started + position * 1000 + 900).toISOString(),
      message: position % 5 === 0 ? `Step ${position + 1} wrote ${position * 100} rows.` : null,
      childPipeline: position >= 10 && position < 15 ? 'pipelines/child.orch.yaml' : null,
    }));
    if (steps > 0) await store.db.insertInto('executionSteps').values(stepRows).execute();
  } finally {
    await store.close();
  }
  return ids;
}

/** Milliseconds from asking for `hash` until `ready` holds in the page. */
async function render(page: Page, hash: string, ready: string): Promise<number> {
  await page.evaluate(() => (location.hash = '#/agents'));
  await page
    .getByRole('heading', { name: 'Agents' })
    .waitFor({ timeout: 10_000 })
    .catch(async (error) => {
      throw new Error(`${error.message}\n${page.url()}\n${await page.locator('body').innerText()}`);
    });
  const started = await page.evaluate(() => performance.now());
  await page.evaluate((to) => (location.hash = to), hash);
  await page.waitForFunction((selector) => document.querySelectorAll(selector).length > 0, ready, { polling: 'raf' });
  return (await page.evaluate(() => performance.now())) - started;
}

export async function bench(): Promise<void> {
  const executablePath = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((file) => existsSync(file));
  if (!executablePath) throw new Error('console bench: Debian chromium is needed (apt-get install chromium)');
  const gzipped = [...consoleAssets().values()].reduce((sum, asset) => sum + asset.gzipped.length, 0) / 1024;
  console.log(`console files: ${gzipped.toFixed(1)} KB gzipped`);
  record({ name: 'console: files gzipped (KB)', measured: gzipped, atMost: 300 });

  const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
  try {
    for (const store of ['sqlite', ...(process.env.BENCH_CONSOLE_STORES ?? 'sqlite,postgres').split(',').slice(1)]) {
      const server = await startBenchServer({ postgres: store === 'postgres' });
      try {
        const accountId = JSON.parse(Buffer.from(server.token.split('.')[1], 'base64url').toString()).account_id as string;
        const client = await dpcJson(['clients', 'create', '--account', accountId, '--role', 'admin'], {
          DPC_DATA_DIR: server.dataDir,
          DATABASE_URL: server.databaseUrl ?? '',
        });
        const { projectId } = await server.api('POST', '/projects', { name: 'bench' });
        await server.api('POST', `/projects/${projectId}/environments`, { name: 'prod' });
        const [runId] = await addRuns(server, accountId, projectId, 1, STEPS);
        // Each render in a page of its own, just signed in: nothing of the run is cached (no ETag kept yet).
        const signedIn = async () => {
          const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
          await page.goto(`${server.url}/dpc/console/`);
          await page.getByLabel('Client ID').fill(client.clientId);
          await page.getByLabel('Client secret').fill(client.clientSecret);
          await page.getByRole('button', { name: 'Sign in' }).click();
          await page.getByRole('heading', { name: 'Runs' }).waitFor();
          return page;
        };
        const runPage = `#/runs/${projectId}/${runId}`;
        const drawn = `[data-step="Step ${STEPS}"]`;
        const measure = async (hash: string, ready: string) => {
          const times: number[] = [];
          for (let i = 0; i < RENDERS; i += 1) {
            const page = await signedIn();
            times.push(await render(page, hash, ready));
            await page.close();
          }
          return median(times);
        };
        const alone = await measure(runPage, drawn);
        await addRuns(server, accountId, projectId, RUNS, 0);
        const among = await measure(runPage, drawn);
        const list = await measure('#/runs', 'tbody tr:nth-child(50)');
        console.log(
          `${store}: run page ${among.toFixed(0)} ms with ${RUNS} runs, ${alone.toFixed(0)} ms with one (${(among / alone).toFixed(2)}×); runs list ${list.toFixed(0)} ms`,
        );
        record({ name: `console ${store}: run page first render with ${RUNS} runs (ms)`, measured: among, atMost: 1000 });
        record({ name: `console ${store}: run page, ${RUNS} runs vs one (ratio)`, measured: among / alone });
        record({ name: `console ${store}: runs list first render with ${RUNS} runs (ms)`, measured: list });
      } finally {
        await server.stop();
      }
    }
  } finally {
    await browser.close();
  }
}
