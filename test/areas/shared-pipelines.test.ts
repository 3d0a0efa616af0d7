import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

const LOADER = `description: "Loads a table incrementally"
type: "orchestration"
version: "1.0"
pipeline:
  components:
    Start:
      type: "start"
`;
const CLEANER = `type: "transformation"
version: "1.0"
pipeline:
  components: {}
`;

function formOf(files: [string, string | Uint8Array<ArrayBuffer>][]): FormData {
  const form = new FormData();
  for (const [path, content] of files) form.append(path, new Blob([content], { type: 'text/plain' }), path.split('/').pop());
  return form;
}

describeEachStore('shared pipeline artifacts', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let developer: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, developer } = await server.prologue({ project: false }));
  });
  after(() => server.close());

  const publish = (files: [string, string | Uint8Array<ArrayBuffer>][], headers: Record<string, string>, token = caller.token) =>
    server.api('POST', '/shared-pipelines/artifacts', { token, body: formOf(files), headers });
  const detailsOf = (query: Record<string, string>, token = caller.token) =>
    server.api('GET', `/shared-pipelines/artifacts/details?${new URLSearchParams(query)}`, { token });

  test('publishing makes each pipeline file a shared pipeline; other parts are ignored', async () => {
    const answer = await publish(
      [
        ['loaders/incremental.orch.yaml', LOADER],
        ['cleaning/clean.tran.yaml', CLEANER],
        ['sql/helper.sql', 'select 1;'],
        ['broken.orch.yaml', '- just\n- a list\n'],
        ['logo.orch.yaml', new Uint8Array([0x89, 0x50, 0x00])],
      ],
      { sharedPipelineIdPrefix: 'acme-common', versionName: '1.0.0', branch: 'main', commitHash: 'abc123' },
    );
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.versionName, '1.0.0');
    const reasons = Object.fromEntries(
      answer.body.ignoredResources.map((r: { name: string; reason: string }) => [r.name, r.reason]),
    );
    assert.deepEqual(Object.keys(reasons).sort(), ['broken.orch.yaml', 'logo.orch.yaml', 'sql/helper.sql']);
    assert.match(reasons['sql/helper.sql'], /not a pipeline file/);
    assert.match(reasons['broken.orch.yaml'], /not a YAML mapping/);
    assert.match(reasons['logo.orch.yaml'], /NUL/);

    const read = await detailsOf({ sharedPipelineIdPrefix: 'acme-common', versionName: '1.0.0' });
    assert.equal(read.status, 200);
    const { createdAt, ...rest } = read.body.artifactDetails;
    assert.ok(!Number.isNaN(Date.parse(createdAt)));
    assert.deepEqual(rest, {
      branch: 'main',
      commitHash: 'abc123',
      enabled: true,
      provider: 'upload',
      sharedPipelineIdPrefix: 'acme-common',
      versionName: '1.0.0',
    });
    assert.deepEqual(read.body.sharedPipelines, [
      { description: '', sharedPipelineId: 'acme-common/cleaning/clean', sourcePipeline: 'cleaning/clean.tran.yaml' },
      {
        description: 'Loads a table incrementally',
        sharedPipelineId: 'acme-common/loaders/incremental',
        sourcePipeline: 'loaders/incremental.orch.yaml',
      },
    ]);
  });

  test(
    'a "billion laughs" pipeline file is refused with a reason, without stalling the server',
    { timeout: 20_000 },
    async () => {
      const lines = ['a0: &a0 [x, x, x, x, x, x, x, x, x]'];
      for (let i = 1; i < 12; i += 1)
        lines.push(
          `a${i}: &a${i} [${Array(9)
            .fill(`*a${i - 1}`)
            .join(', ')}]`,
        );
      const bomb = lines.join('\n');
      const aliased = 'description: reuses a block\nbase: &base {retries: 3}\nstep: *base\n';
      const health = (async () => {
        const started = Date.now();
        await server.request('GET', '/healthz');
        return Date.now() - started;
      })();
      const answer = await publish(
        [
          ['bomb.orch.yaml', bomb],
          ['aliased.orch.yaml', aliased],
          ['broken.tran.yaml', 'a: ['],
          ['huge.orch.yaml', `description: big\nx: "${'y'.repeat(1024 * 1024)}"\n`],
          // Many nodes and not one alias (attack finding: once refused as if aliases expanded too much).
          ['many.orch.yaml', `description: many\nx: [${Array(120_000).fill('1').join(',')}]\n`],
          // Nested deeper than any pipeline (attack finding: once a stack overflow's text as the reason).
          ['deep.orch.yaml', `description: deep\nx: ${'['.repeat(5000)}${']'.repeat(5000)}\n`],
        ],
        { sharedPipelineIdPrefix: 'bounded', versionName: 'v1' },
      );
      assert.equal(answer.status, 200, answer.text);
      const reasons = Object.fromEntries(
        answer.body.ignoredResources.map((r: { name: string; reason: string }) => [r.name, r.reason]),
      );
      assert.match(reasons['bomb.orch.yaml'], /^not a pipeline: larger than \d+ YAML nodes once its aliases are expanded$/);
      assert.match(reasons['many.orch.yaml'], /^not a pipeline: larger than 100000 YAML nodes$/);
      assert.equal(reasons['deep.orch.yaml'], 'not a pipeline: nested more than 100 levels deep');
      assert.match(reasons['broken.tran.yaml'], /^not a pipeline: not valid YAML/);
      assert.match(reasons['huge.orch.yaml'], /^not a pipeline: larger than \d+ bytes$/);
      assert.equal(reasons['aliased.orch.yaml'], undefined, 'a file with a few aliases is a pipeline');
      const details = await detailsOf({ sharedPipelineIdPrefix: 'bounded', versionName: 'v1' });
      assert.deepEqual(
        details.body.sharedPipelines.map((p: { description: string }) => p.description),
        ['reuses a block'],
      );
      assert.ok((await health) < 5000, 'the server kept answering');
    },
  );

  test('a version is unique per prefix (409); E14 without versionName answers the latest', async () => {
    const headers = { sharedPipelineIdPrefix: 'versions', versionName: 'v1' };
    assert.equal((await publish([['a.orch.yaml', LOADER]], headers)).status, 200);
    expectProblem(await publish([['b.orch.yaml', LOADER]], headers), 409, 'conflict');
    assert.equal((await publish([['b.orch.yaml', LOADER]], { ...headers, versionName: 'v2' })).status, 200);
    const latest = await detailsOf({ sharedPipelineIdPrefix: 'versions' });
    assert.equal(latest.body.artifactDetails.versionName, 'v2');
    assert.deepEqual(
      latest.body.sharedPipelines.map((p: { sourcePipeline: string }) => p.sourcePipeline),
      ['b.orch.yaml'],
    );
    assert.equal(
      (await detailsOf({ sharedPipelineIdPrefix: 'versions', versionName: 'v1' })).body.sharedPipelines[0].sourcePipeline,
      'a.orch.yaml',
    );
    expectProblem(await detailsOf({ sharedPipelineIdPrefix: 'versions', versionName: 'v9' }), 404, 'not-found');
    expectProblem(await detailsOf({ sharedPipelineIdPrefix: 'nothing-here' }), 404, 'not-found');
  });

  test('E13 disables and enables a version; 404 when unknown; bounds are checked', async () => {
    assert.equal((await publish([['a.orch.yaml', LOADER]], { sharedPipelineIdPrefix: 'switch', versionName: 'v1' })).status, 200);
    const off = await server.api('PATCH', '/shared-pipelines/artifacts', {
      token: caller.token,
      body: { enabled: false, sharedPipelineIdPrefix: 'switch', versionName: 'v1' },
    });
    assert.equal(off.status, 200);
    assert.deepEqual(off.body, { enabled: false, versionName: 'v1' });
    assert.equal((await detailsOf({ sharedPipelineIdPrefix: 'switch' })).body.artifactDetails.enabled, false);
    const on = await server.api('PATCH', '/shared-pipelines/artifacts', {
      token: caller.token,
      body: { enabled: true, sharedPipelineIdPrefix: 'switch', versionName: 'v1' },
    });
    assert.deepEqual(on.body, { enabled: true, versionName: 'v1' });
    expectProblem(
      await server.api('PATCH', '/shared-pipelines/artifacts', {
        token: caller.token,
        body: { enabled: true, sharedPipelineIdPrefix: 'switch', versionName: 'v2' },
      }),
      404,
    );
    const bad = expectProblem(
      await server.api('PATCH', '/shared-pipelines/artifacts', {
        token: caller.token,
        body: { enabled: 'yes', sharedPipelineIdPrefix: '', versionName: 'x'.repeat(256) },
      }),
      400,
    );
    assert.deepEqual(bad.violations?.sort(), [
      'body.enabled: must be boolean',
      'body.sharedPipelineIdPrefix: must NOT have fewer than 1 characters',
      'body.versionName: must NOT have more than 255 characters',
    ]);
    const missing = expectProblem(await server.api('GET', '/shared-pipelines/artifacts/details', { token: caller.token }), 400);
    assert.deepEqual(missing.violations, ['sharedPipelineIdPrefix: is required']);
  });

  test('headers are required and named; roles; another account sees nothing', async () => {
    const none = expectProblem(await publish([['a.orch.yaml', LOADER]], {}), 400, 'bad-request');
    assert.deepEqual(none.violations?.sort(), ['sharedPipelineIdPrefix: is required', 'versionName: is required']);

    expectProblem(
      await publish([['a.orch.yaml', LOADER]], { sharedPipelineIdPrefix: 'roles', versionName: 'v1' }, viewer),
      403,
      'forbidden',
    );
    expectProblem(
      await server.api('PATCH', '/shared-pipelines/artifacts', {
        token: viewer,
        body: { enabled: false, sharedPipelineIdPrefix: 'acme-common', versionName: '1.0.0' },
      }),
      403,
    );
    assert.equal((await detailsOf({ sharedPipelineIdPrefix: 'acme-common' }, viewer)).status, 200);
    assert.equal(
      (await publish([['a.orch.yaml', LOADER]], { sharedPipelineIdPrefix: 'roles', versionName: 'v1' }, developer)).status,
      200,
    );

    const other = await server.newAccount('other');
    expectProblem(await detailsOf({ sharedPipelineIdPrefix: 'acme-common' }, other.token), 404);
    expectProblem(
      await server.api('PATCH', '/shared-pipelines/artifacts', {
        token: other.token,
        body: { enabled: false, sharedPipelineIdPrefix: 'acme-common', versionName: '1.0.0' },
      }),
      404,
    );
    // The same prefix and version in another account is that account's own.
    assert.equal(
      (await publish([['a.orch.yaml', LOADER]], { sharedPipelineIdPrefix: 'acme-common', versionName: '1.0.0' }, other.token))
        .status,
      200,
    );
  });
});
