import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { consoleAssets } from '../../src/areas/console/routes.ts';
import { scratchStore } from '../helpers/harness.ts';
import { orchestration, WAITING } from '../helpers/executions.ts';
import { runDpc, spawnAgent, spawnServe } from '../helpers/processes.ts';

/**
 * The web console in a real browser (Debian's Chromium, headless, driven by playwright-core) against a real
 * server and the reference agent: sign in, start a run and watch it finish on the timeline, cancel a long
 * one, a viewer sees no write button and a forced write shows the server's 403. Screenshots of every page go
 * to test-artifacts/ (not committed); axe-core checks every page for serious or critical violations.
 */

const ARTIFACTS = path.resolve('test-artifacts');
const QUICK = orchestration(
  `    Start:
      type: "start"
      transitions:
        unconditional: ["Say hello"]
    Say hello:
      type: "print-variables"
      parameters:
        prefixText: "hello"
      transitions:
        success: ["Check"]
    Check:
      type: "assert-scalar-variables"
      parameters:
        assertions:
          - ["region", "==", "eu"]
      transitions:
        success: ["End Success"]
        failure: ["End Failure"]
    End Success:
      type: "end-success"
    End Failure:
      type: "end-failure"
`,
  `  variables:
    region:
      metadata:
        type: "TEXT"
        scope: "COPIED"
        visibility: "PUBLIC"
      defaultValue: "us"
    targets:
      metadata:
        type: "GRID"
        columns:
          table:
            columnType: "TEXT"
          rows:
            columnType: "NUMBER"
        scope: "COPIED"
        visibility: "PUBLIC"
      defaultValue:
        - - "orders"
          - "10"
`,
);

/** Chromium from Debian, installed with apt-get where missing (as .ci/run does). */
function chromiumPath(): string {
  const known = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((file) => existsSync(file));
  if (known) return known;
  const install = spawnSync(
    'sh',
    ['-c', 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium'],
    {
      stdio: 'inherit',
    },
  );
  assert.equal(install.status, 0, 'apt-get install chromium failed');
  return '/usr/bin/chromium';
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

describe('the web console', () => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  let serve: Awaited<ReturnType<typeof spawnServe>>;
  let agent: Awaited<ReturnType<typeof spawnAgent>>;
  let stateDir: string;
  let browser: Browser;
  let admin: { clientId: string; clientSecret: string; token: string };
  let viewer: { clientId: string; clientSecret: string };
  let projectId: string;

  async function call(method: string, apiPath: string, body?: unknown, headers: Record<string, string> = {}) {
    const isForm = body instanceof FormData;
    const answer = await fetch(`${serve.url}/dpc/v1${apiPath}`, {
      method,
      headers: {
        authorization: `Bearer ${admin.token}`,
        ...(body !== undefined && !isForm && { 'content-type': 'application/json' }),
        ...headers,
      },
      body: body === undefined ? undefined : isForm ? body : JSON.stringify(body),
    });
    const text = await answer.text();
    assert.ok(answer.status < 300, `${method} ${apiPath}: ${answer.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  }

  async function screenshot(page: Page, name: string) {
    await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
  }

  /** axe-core over the page as it is: no serious or critical violation. */
  async function accessible(page: Page, what: string) {
    await page.evaluate(axeSource);
    const violations = await page.evaluate(async () => {
      const result = await (globalThis as any).axe.run(document, { resultTypes: ['violations'] });
      return result.violations
        .filter((v: any) => v.impact === 'serious' || v.impact === 'critical')
        .map((v: any) => `${v.id}: ${v.help} (${v.nodes.map((n: any) => n.target.join(' ')).join(', ')})`);
    });
    assert.deepEqual(violations, [], `${what}: ${violations.join('\n')}`);
  }

  async function signIn(page: Page, who: { clientId: string; clientSecret: string }) {
    await page.goto(`${serve.url}/`);
    await page.getByLabel('Client ID').fill(who.clientId);
    await page.getByLabel('Client secret').fill(who.clientSecret);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Runs' }).waitFor();
  }

  before(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    const executablePath = chromiumPath();
    const scratch = await scratchStore('sqlite');
    drop = scratch.drop;
    env = {
      DPC_DATA_DIR: scratch.settings.dataDir,
      DATABASE_URL: '',
      DPC_ENCRYPTION_KEYS: Buffer.alloc(32, 7).toString('base64'),
    };
    const created = runDpc(['accounts', 'create', '--name', 'console'], env);
    assert.equal(created.status, 0, created.stderr);
    const account = JSON.parse(created.stdout);
    const viewerCreated = runDpc(['clients', 'create', '--account', account.accountId, '--role', 'viewer'], env);
    assert.equal(viewerCreated.status, 0, viewerCreated.stderr);
    viewer = JSON.parse(viewerCreated.stdout);
    serve = await spawnServe(env);
    const token = await fetch(`${serve.url}/oauth/dpc/token`, {
      method: 'POST',
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: account.clientId,
        client_secret: account.clientSecret,
      }),
    });
    admin = { ...account, token: ((await token.json()) as { access_token: string }).access_token };

    const { agentId } = await call('POST', '/agents', {
      name: 'reference',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'fargate',
    });
    const credentials = await call('POST', `/agents/${agentId}/credentials`);
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-console-agent-'));
    agent = await spawnAgent({ url: serve.url, ...credentials, stateDir });
    ({ projectId } = await call('POST', '/projects', { name: 'Sales' }));
    await call('POST', `/projects/${projectId}/streaming-pipelines`, {
      name: 'orders-cdc',
      agentId,
      advancedProperties: { 'snapshot.mode': 'initial' },
      streamingSource: {
        type: 'postgres',
        connection: {
          host: 'db.internal',
          port: 5432,
          database: 'orders',
          username: 'replicator',
          password: { secretType: 'aws_secrets_manager', secretName: 'orders-db', key: 'password' },
        },
        tables: [{ schema: 'public', table: 'orders' }],
      },
      streamingTarget: { type: 's3', bucket: 'cdc', prefix: 'orders' },
    });
    await call('POST', `/projects/${projectId}/environments`, { name: 'dev', defaultAgentId: agentId });
    await call('POST', `/projects/${projectId}/variables`, { name: 'delay', type: 'NUMBER', behaviour: 'COPIED', value: 0 });
    await call('POST', `/projects/${projectId}/schedules`, {
      name: 'nightly',
      pipelineName: 'pipelines/quick.orch.yaml',
      environmentName: 'dev',
      cronExpression: '0 0 3 * * ?',
      scheduleEnabled: false,
    });
    const form = new FormData();
    form.append('pipelines/quick.orch.yaml', new Blob([QUICK], { type: 'text/plain' }), 'file');
    form.append('pipelines/wait.orch.yaml', new Blob([WAITING], { type: 'text/plain' }), 'file');
    await call('POST', `/projects/${projectId}/artifacts`, form, { versionName: '1.0.0', environmentName: 'dev' });
    browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
  });

  after(async () => {
    await browser?.close();
    agent?.child.kill('SIGTERM');
    await agent?.exited;
    serve?.child.kill('SIGTERM');
    await serve?.exited;
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
    await drop?.();
  });

  test('served from the server itself: / sends to /dpc/console/, a strict CSP, no other origin, ≤ 300 KB gzipped', async () => {
    const root = await fetch(`${serve.url}/`, { redirect: 'manual' });
    assert.equal(root.status, 302);
    assert.equal(root.headers.get('location'), '/dpc/console/');
    const page = await fetch(`${serve.url}/dpc/console/`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-security-policy')!, /default-src 'none'; script-src 'self'/);
    const html = await page.text();
    assert.doesNotMatch(html, /https?:\/\//, 'no external URL in the page');
    const again = await fetch(`${serve.url}/dpc/console/`, { headers: { 'if-none-match': page.headers.get('etag')! } });
    assert.equal(again.status, 304);
    assert.equal((await fetch(`${serve.url}/dpc/console/../package.json`)).status, 404);
    assert.equal((await fetch(`${serve.url}/dpc/console/nothing.js`)).status, 404);
    let gzipped = 0;
    for (const [name, asset] of consoleAssets()) {
      gzipped += asset.gzipped.length;
      assert.doesNotMatch(asset.body.toString('utf8'), /(src|href)=["']https?:\/\//, `${name} loads nothing from another origin`);
    }
    assert.ok(gzipped <= 300 * 1024, `every console file together is ${gzipped} bytes gzipped`);
  });

  test('an API answer is polled with its ETag: the same GET with If-None-Match answers 304', async () => {
    const first = await fetch(`${serve.url}/dpc/v1/projects`, { headers: { authorization: `Bearer ${admin.token}` } });
    const etag = first.headers.get('etag');
    assert.ok(etag);
    const second = await fetch(`${serve.url}/dpc/v1/projects`, {
      headers: { authorization: `Bearer ${admin.token}`, 'if-none-match': etag },
    });
    assert.equal(second.status, 304);
  });

  test('an admin signs in, sees the pipeline graph, starts a run and watches it finish, cancels a long one', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    const failures: string[] = [];
    page.on('pageerror', (error) => failures.push(error.message));
    // A request the page abandons when the view changes is no failure; anything else is.
    page.on('requestfailed', (request) => {
      const reason = request.failure()?.errorText ?? '';
      if (reason !== 'net::ERR_ABORTED') failures.push(`${request.url()} ${reason}`);
    });
    try {
      await page.goto(`${serve.url}/dpc/console/`);
      await page.getByRole('heading', { name: 'Sign in' }).waitFor();
      await accessible(page, 'sign in');
      await screenshot(page, 'sign-in');
      // A wrong secret is refused in the page.
      await page.getByLabel('Client ID').fill(admin.clientId);
      await page.getByLabel('Client secret').fill('wrong');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').waitFor();
      await signIn(page, admin);
      await accessible(page, 'runs');

      await page.getByRole('link', { name: 'Projects' }).click();
      await page.getByRole('link', { name: 'Sales' }).click();
      await page.getByRole('heading', { name: 'Environment dev' }).waitFor();
      // The environment's published versions, the newest first.
      await page.getByRole('cell', { name: '1.0.0', exact: true }).waitFor();
      await accessible(page, 'project');
      await screenshot(page, 'project');
      await page.getByRole('link', { name: 'pipelines/quick.orch.yaml' }).click();
      await page.locator('[data-component="Check"]').waitFor();
      assert.equal(await page.locator('svg [data-component]').count(), 5);
      assert.equal(await page.locator('svg line').count(), 4);
      await accessible(page, 'pipeline');
      await screenshot(page, 'pipeline');

      // Start: the pipeline's TEXT variable and the project's NUMBER variable are typed inputs.
      await page.getByRole('link', { name: 'Run this pipeline…' }).click();
      await page.getByRole('button', { name: 'Start run' }).waitFor();
      assert.equal(await page.getByLabel('delay (NUMBER, project)').getAttribute('type'), 'number');
      await page.getByLabel('region (TEXT, pipeline)').fill('eu');
      // The pipeline's GRID variable is a table of inputs, a column per declared column, its default as the first row.
      const grid = page.getByRole('group', { name: 'targets (GRID, pipeline)' });
      assert.deepEqual(await grid.locator('th').allInnerTexts(), ['table', 'rows', 'Row']);
      assert.equal(await page.getByLabel('targets row 1, table').inputValue(), 'orders');
      await page.getByRole('button', { name: 'Add a row to targets' }).click();
      await page.getByLabel('targets row 2, table').fill('customers');
      await page.getByLabel('targets row 2, rows').fill('20');
      await accessible(page, 'start');
      await screenshot(page, 'start');
      const started = page.waitForRequest(
        (request) => request.method() === 'POST' && request.url().endsWith('/pipeline-executions'),
      );
      await page.getByRole('button', { name: 'Start run' }).click();
      assert.deepEqual(JSON.parse((await started).postData() ?? '{}').gridVariables, {
        targets: [
          ['orders', '10'],
          ['customers', '20'],
        ],
      });
      await page.waitForURL(/#\/runs\/[^/]+\/[0-9a-f-]+$/);
      // The timeline follows the run live until it is done.
      await page.locator('[data-run-status="SUCCESS"]').waitFor({ timeout: 60_000 });
      await page.locator('[data-step="End Success"][data-status="SUCCESS"]').waitFor({ timeout: 60_000 });
      for (const step of ['Start', 'Say hello', 'Check']) {
        assert.equal(await page.locator(`[data-step="${step}"]`).getAttribute('data-status'), 'SUCCESS', step);
      }
      assert.equal(await page.getByRole('button', { name: 'Cancel' }).count(), 0, 'a finished run has no cancel');
      assert.equal(await page.locator('[data-steps-left-out]').count(), 0, 'a run of a few steps leaves none out');
      await accessible(page, 'run');
      await screenshot(page, 'run');

      // A long run: started with a typed variable, cancelled from its page.
      await page.goto(`${serve.url}/dpc/console/#/start/${projectId}/dev/pipelines%2Fwait.orch.yaml`);
      await page.getByLabel('delay (NUMBER, project)').fill('600');
      await page.getByRole('button', { name: 'Start run' }).click();
      await page.waitForURL(/#\/runs\/[^/]+\/[0-9a-f-]+$/);
      await page.locator('[data-step="Wait"][data-status="RUNNING"]').waitFor({ timeout: 60_000 });
      await page.getByRole('button', { name: 'Cancel', exact: true }).click();
      await page.locator('[data-run-status="CANCELLED"]').waitFor({ timeout: 60_000 });
      await page.locator('[data-step="Wait"][data-status="CANCELLED"]').waitFor({ timeout: 60_000 });
      await screenshot(page, 'run-cancelled');

      // The runs list filters by status.
      await page.goto(`${serve.url}/dpc/console/#/runs?status=CANCELLED`);
      await page.locator('tbody tr').first().waitFor();
      assert.equal(await page.locator('tbody tr').count(), 1);
      await page.goto(`${serve.url}/dpc/console/#/runs`);
      await page.locator('tbody tr:nth-child(2)').waitFor();
      await screenshot(page, 'runs');

      for (const [view, heading] of [
        ['agents', 'Agents'],
        ['schedules', 'Schedules'],
        ['streaming', 'Streaming pipelines'],
        ['ai', 'AI tasks'],
      ]) {
        await page.goto(`${serve.url}/dpc/console/#/${view}`);
        await page.getByRole('heading', { name: heading }).waitFor();
        await page.locator('main table, main p').first().waitFor();
        await accessible(page, view);
        await screenshot(page, view);
      }
      await page.goto(`${serve.url}/dpc/console/#/agents`);
      await page.getByRole('cell', { name: 'connected', exact: true }).waitFor();
      // Streaming pipelines: the list, then each one's status (its state and since when) read in turn.
      await page.goto(`${serve.url}/dpc/console/#/streaming`);
      await page.getByRole('cell', { name: 'orders-cdc' }).waitFor();
      await page.waitForFunction(() => /UTC/.test(document.querySelector('tbody tr td:nth-child(5)')?.textContent ?? ''));
      assert.equal(await page.locator('tbody tr td:nth-child(4)').innerText(), 'STOPPED');
      // Enable the schedule, then its next run time shows.
      await page.goto(`${serve.url}/dpc/console/#/schedules`);
      await page.getByRole('button', { name: 'Enable nightly' }).click();
      await page.getByRole('button', { name: 'Disable nightly' }).waitFor();
      assert.match(await page.locator('tbody tr td:nth-child(5)').innerText(), /UTC/);

      // Phone width: the run page still fits.
      await page.setViewportSize({ width: 390, height: 844 });
      await page.goto(`${serve.url}/dpc/console/#/runs`);
      await page.locator('tbody tr').first().waitFor();
      await screenshot(page, 'runs-phone');
      await accessible(page, 'runs at phone width');

      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByRole('heading', { name: 'Sign in' }).waitFor();
      assert.deepEqual(failures, []);
    } finally {
      await context.close();
    }
  });

  test('live: the run page follows the event stream, reads nothing while nothing happens, and nothing while hidden', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    const runReads: string[] = [];
    const streams: { url: string; authorization?: string }[] = [];
    page.on('request', (request) => {
      const url = request.url();
      if (url.includes('/dpc/v1/events/stream')) streams.push({ url, authorization: request.headers().authorization });
      else if (url.includes('/pipeline-executions/')) runReads.push(url);
    });
    const longRun = async () =>
      (
        await call('POST', `/projects/${projectId}/pipeline-executions`, {
          environmentName: 'dev',
          pipelineName: 'pipelines/wait.orch.yaml',
          scalarVariables: { delay: '600' },
        })
      ).pipelineExecutionId as string;
    const cancel = (runId: string) =>
      call('PATCH', `/projects/${projectId}/pipeline-executions/${runId}`, { forceUpdate: false, status: 'CANCELLED' });
    const setHidden = (hidden: boolean) =>
      page.evaluate((value) => {
        Object.defineProperty(document, 'hidden', { value, configurable: true });
        document.dispatchEvent(new Event('visibilitychange'));
      }, hidden);
    try {
      await signIn(page, admin);
      const first = await longRun();
      await page.goto(`${serve.url}/dpc/console/#/runs/${projectId}/${first}`);
      // The step's start reaches the page through the stream (step-started), not through a poll.
      await page.locator('[data-step="Wait"][data-status="RUNNING"]').waitFor({ timeout: 60_000 });
      const stream = streams.find((s) => s.url.includes(`projectId=${projectId}`));
      assert.ok(stream, `the run page follows the event stream of its project: ${streams.map((s) => s.url).join(', ')}`);
      assert.match(stream.authorization ?? '', /^Bearer /, 'with the bearer token');
      assert.match(stream.url, /type=pipeline-execution\.\*/);
      await page.waitForTimeout(2500); // the catch-up reads after the stream opened
      const before = runReads.length;
      await page.waitForTimeout(5000);
      assert.equal(runReads.length - before, 0, `no read while nothing happens: ${runReads.slice(before).join(', ')}`);
      await cancel(first);
      await page.locator('[data-run-status="CANCELLED"]').waitFor({ timeout: 30_000 });
      await page.locator('[data-step="Wait"][data-status="CANCELLED"]').waitFor({ timeout: 30_000 });

      // Hidden: the stream is closed and nothing is read; shown again, one read catches up.
      const second = await longRun();
      await page.goto(`${serve.url}/dpc/console/#/runs/${projectId}/${second}`);
      await page.locator('[data-step="Wait"][data-status="RUNNING"]').waitFor({ timeout: 60_000 });
      await setHidden(true);
      const hiddenFrom = runReads.length;
      const streamsFrom = streams.length;
      await cancel(second);
      await page.waitForTimeout(5000);
      assert.equal(runReads.length - hiddenFrom, 0, 'nothing is read while the page is hidden');
      assert.equal(streams.length - streamsFrom, 0, 'no stream is opened while the page is hidden');
      assert.equal(await page.locator('[data-run-status="RUNNING"]').count(), 1, 'the page shows what it last read');
      await setHidden(false);
      await page.locator('[data-run-status="CANCELLED"]').waitFor({ timeout: 30_000 });
    } finally {
      await context.close();
    }
  });

  test('a run of more steps than the page draws says how many it has and how many are left out', async () => {
    const runId = (
      await call('POST', `/projects/${projectId}/pipeline-executions`, {
        environmentName: 'dev',
        pipelineName: 'pipelines/quick.orch.yaml',
        scalarVariables: { region: 'eu' },
      })
    ).pipelineExecutionId as string;
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    // The run's steps list answers as the API does for a run of 1,234 steps (running that many is slow):
    // pages of at most `size`, each with the list's `total`.
    const TOTAL = 1234;
    const reads: number[] = [];
    await page.route(new RegExp(`/pipeline-executions/${runId}/steps\\?`), async (route) => {
      const query = new URL(route.request().url()).searchParams;
      const [number, size] = [Number(query.get('page')), Number(query.get('size'))];
      reads.push(number);
      const at = new Date().toISOString();
      const results = Array.from({ length: Math.max(0, Math.min(size, TOTAL - number * size)) }, (_, i) => ({
        id: String(number * size + i),
        name: `Step ${number * size + i + 1}`,
        result: { status: 'SUCCESS', startedAt: at, finishedAt: at, message: '' },
        childPipeline: null,
      }));
      await route.fulfill({ json: { results, page: number, size, total: TOTAL } });
    });
    try {
      await signIn(page, admin);
      await page.goto(`${serve.url}/dpc/console/#/runs/${projectId}/${runId}`);
      const note = page.locator('[data-steps-left-out]');
      await note.waitFor();
      assert.equal(await note.getAttribute('data-steps-left-out'), '234');
      assert.match(await note.innerText(), /^This run has 1,234 steps: the first 1,000 are shown, 234 are left out/);
      assert.equal(await page.locator('[data-step]').count(), 1000, 'the first 1,000 steps are drawn');
      assert.deepEqual(reads.slice(0, 10), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 'ten pages of 100 read, no more');
      await accessible(page, 'run with steps left out');
      // The top of the page (the whole of it is 1,000 rows long).
      await page.screenshot({ path: path.join(ARTIFACTS, 'run-steps-left-out.png') });
    } finally {
      await context.close();
    }
  });

  test('a viewer sees no write button, and a forced write shows the 403 in the page', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    try {
      // The viewer signs in with an access token got elsewhere (a wrong one is refused in the page).
      const answer = await fetch(`${serve.url}/oauth/dpc/token`, {
        method: 'POST',
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_id: viewer.clientId,
          client_secret: viewer.clientSecret,
        }),
      });
      const { access_token: token } = (await answer.json()) as { access_token: string };
      await page.goto(`${serve.url}/`);
      await page.getByLabel('Access token', { exact: true }).fill('not-a-token');
      await page.getByRole('button', { name: 'Use the token' }).click();
      await page.getByRole('alert').waitFor();
      await page.getByLabel('Access token', { exact: true }).fill(token);
      await page.getByRole('button', { name: 'Use the token' }).click();
      await page.getByRole('heading', { name: 'Runs' }).waitFor();
      assert.equal(
        await page
          .locator('#who')
          .innerText()
          .then((text) => text.startsWith('viewer')),
        true,
      );
      await page.locator('tbody tr').first().waitFor();
      await page.locator('tbody tr a').first().click();
      await page.getByRole('heading', { name: /^Run / }).waitFor();
      await page.getByRole('heading', { name: 'Timeline' }).waitFor();
      assert.equal(await page.getByRole('button', { name: /Cancel/ }).count(), 0);
      assert.equal(await page.getByRole('link', { name: 'Run again…' }).count(), 0);
      await page.goto(`${serve.url}/dpc/console/#/schedules`);
      await page.getByRole('cell', { name: 'nightly' }).waitFor();
      assert.equal(await page.locator('main button').count(), 0, 'no enable/disable for a viewer');
      await screenshot(page, 'viewer-schedules');

      await page.goto(`${serve.url}/dpc/console/#/start/${projectId}/dev/pipelines%2Fquick.orch.yaml`);
      const start = page.getByRole('button', { name: 'Start run' });
      await start.waitFor();
      assert.equal(await start.isDisabled(), true);
      // Forced: the button enabled by hand; the server refuses and the page says so.
      await start.evaluate((button) => button.removeAttribute('disabled'));
      await start.click();
      const alert = page.getByRole('alert');
      await alert.waitFor();
      assert.match(await alert.innerText(), /^403 Forbidden/);
      await screenshot(page, 'viewer-forbidden');
    } finally {
      await context.close();
    }
  });
});
