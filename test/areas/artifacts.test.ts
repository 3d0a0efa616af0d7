import assert from 'node:assert/strict';
import http from 'node:http';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

const PROFILE_TYPE = 'application/vnd.matillion.connector-profile+json';

/** One file of a project folder: its relative path and content, as a publishing script reads it. */
type ProjectFile = [path: string, content: string | Uint8Array<ArrayBuffer>];

/** A realistic project folder: pipelines in YAML, SQL, Python, nested folders, and a binary image. */
const PROJECT_FOLDER: ProjectFile[] = [
  [
    'pipelines/orchestration/daily-load.orch.yaml',
    `type: "orchestration"
version: "1.0"
pipeline:
  components:
    Start:
      type: "start"
      transitions:
        unconditional:
          - "Load orders"
    Load orders:
      type: "run-transformation"
      parameters:
        transformationJob: "pipelines/transformation/clean-orders.tran.yaml"
`,
  ],
  [
    'pipelines/transformation/clean-orders.tran.yaml',
    `type: "transformation"
version: "1.0"
pipeline:
  components:
    Orders:
      type: "table-input"
      parameters:
        tableName: "raw_orders"
        columnNames: ["id", "amount", "placed_at"]
`,
  ],
  [
    'sql/orders/merge_orders.sql',
    'MERGE INTO orders o USING staging_orders s ON o.id = s.id\nWHEN MATCHED THEN UPDATE SET amount = s.amount\nWHEN NOT MATCHED THEN INSERT (id, amount) VALUES (s.id, s.amount);\n',
  ],
  [
    'scripts/python/notify.py',
    "import os\n\ndef notify(message: str) -> None:\n    print(f\"[{os.environ.get('ENV', 'dev')}] {message}\")  # déjà vu: non-ASCII text is fine\n",
  ],
  ['README.md', '# Sales analytics\n\nDaily order loads.\n'],
  [
    'images/logo.png',
    new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52]),
  ],
];

interface Profile {
  alternateId?: string;
  id?: string;
}

/** The project folder plus every connector profile, as one multipart request of a publishing tool. */
function projectFolderForm(flex: Profile[], custom: Profile[]): FormData {
  const form = new FormData();
  for (const [path, content] of PROJECT_FOLDER)
    form.append(path, new Blob([content], { type: 'text/plain' }), path.split('/').pop());
  const parts = [
    ...flex.map((profile) => [`connector-profile:flex-${profile.alternateId}.json`, profile] as const),
    ...custom.map((profile) => [`connector-profile:custom-${profile.id}.json`, profile] as const),
  ];
  for (const [name, profile] of parts) form.append(name, new Blob([JSON.stringify(profile)], { type: PROFILE_TYPE }), name);
  return form;
}

function formOf(files: ProjectFile[]): FormData {
  const form = new FormData();
  for (const [path, content] of files) form.append(path, new Blob([content], { type: 'text/plain' }), 'file');
  return form;
}

describeEachStore('artifacts', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let developer: string;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, developer, projectId } = await server.prologue({ environments: ['test', 'production'] }));
  });
  after(() => server.close());

  const upload = (body: FormData, headers: Record<string, string>, token = caller.token, project = projectId) =>
    server.api('POST', `/projects/${project}/artifacts`, { token, body, headers });
  const details = (environmentName: string, versionName: string, token = caller.token) =>
    server.api('GET', `/projects/${projectId}/artifacts/details?${new URLSearchParams({ environmentName, versionName })}`, {
      token,
    });
  const asset = (environmentName: string, versionName: string, path: string) =>
    server.api('GET', `/projects/${projectId}/artifacts/assets?${new URLSearchParams({ environmentName, versionName, path })}`, {
      token: caller.token,
    });

  test('publishing a project folder with its connector profiles stores every text file and profile, ignores the binary', async () => {
    // As a publishing tool does: fetch the flex and custom connector profiles first, then upload everything at once.
    const created = await server.api('POST', '/custom-connectors', {
      token: caller.token,
      body: {
        name: 'Internal billing API',
        endpoints: [{ name: 'Invoices', url: 'https://billing.example.com/invoices', httpMethod: 'GET', auth: 'NONE' }],
      },
    });
    assert.equal(created.status, 201, created.text);
    const flex: Profile[] = (await server.api('GET', '/flex-connectors', { token: caller.token })).body;
    const custom: Profile[] = (await server.api('GET', '/custom-connectors', { token: caller.token })).body;
    assert.ok(flex.length > 0 && custom.length === 1);
    const answer = await upload(projectFolderForm(flex, custom), {
      versionName: 'v1',
      environmentName: 'test',
      commitHash: '9fceb02d0ae598e95dc970b74767f19372d61af8',
      branch: 'main',
    });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.versionName, 'v1');
    assert.deepEqual(answer.body.ignoredResources, [{ name: 'images/logo.png', reason: 'not text: contains a NUL byte' }]);

    const read = await details('test', 'v1');
    assert.equal(read.status, 200);
    const profileParts = [
      ...flex.map((profile) => `connector-profile:flex-${profile.alternateId}.json`),
      `connector-profile:custom-${custom[0].id}.json`,
    ];
    const files = PROJECT_FOLDER.map(([path]) => path).filter((path) => !path.endsWith('.png'));
    assert.deepEqual(read.body.assets, [...files, ...profileParts].sort());
    const d = read.body.details;
    assert.equal(d.versionName, 'v1');
    assert.equal(d.branch, 'main');
    assert.equal(d.commitHash, '9fceb02d0ae598e95dc970b74767f19372d61af8');
    assert.equal(d.enabled, true);
    assert.equal(d.provider, 'upload');
    assert.equal(d.deployedAt, d.createdAt);
    assert.ok(!Number.isNaN(Date.parse(d.createdAt)));

    // Every asset reads back byte for byte.
    for (const [path, content] of PROJECT_FOLDER.filter(([p]) => p.endsWith('.png') === false)) {
      const back = await asset('test', 'v1', path);
      assert.equal(back.status, 200);
      assert.match(back.headers.get('content-type')!, /^text\/plain/);
      assert.equal(back.text, content);
    }
    const profile = await asset('test', 'v1', `connector-profile:custom-${custom[0].id}.json`);
    assert.match(profile.headers.get('content-type')!, /^application\/vnd\.matillion\.connector-profile\+json/);
    assert.deepEqual(profile.body, custom[0]);
    expectProblem(await asset('test', 'v1', 'images/logo.png'), 404, 'not-found');
  });

  test('parts larger than a commit batch (4 MB) are stored whole, beside small ones', async () => {
    const large = 'select 1 as big_column from dual;\n'.repeat(160_000); // about 5.4 MB
    const files: ProjectFile[] = [
      ['a-small.sql', 'select 1;'],
      ['b-large.sql', large],
      ['c-small.sql', 'select 2;'],
    ];
    const answer = await upload(formOf(files), { versionName: 'large', environmentName: 'test' });
    assert.equal(answer.status, 200, answer.text);
    for (const [path, content] of files) assert.equal((await asset('test', 'large', path)).text, content, path);
  });

  test('a version name is unique per environment: 409 on reuse, nothing replaced', async () => {
    const first = await upload(formOf([['a.sql', 'select 1;']]), { versionName: 'dup', environmentName: 'test' });
    assert.equal(first.status, 200);
    expectProblem(
      await upload(formOf([['b.sql', 'select 2;']]), { versionName: 'dup', environmentName: 'test' }),
      409,
      'conflict',
    );
    assert.deepEqual((await details('test', 'dup')).body.assets, ['a.sql']);
    // The same name in another environment is another version.
    assert.equal(
      (await upload(formOf([['b.sql', 'select 2;']]), { versionName: 'dup', environmentName: 'production' })).status,
      200,
    );
  });

  test('unsafe paths, repeats, non-UTF-8 and NUL parts are listed in ignoredResources, not stored', async () => {
    const answer = await upload(
      formOf([
        ['ok/one.sql', 'select 1;'],
        ['/etc/passwd', 'x'],
        ['C:/windows/x.sql', 'x'],
        ['../outside.sql', 'x'],
        ['a/./b.sql', 'x'],
        ['a//b.sql', 'x'],
        ['trailing/', 'x'],
        ['back\\slash.sql', 'x'],
        ['', 'x'],
        ['ok/one.sql', 'select 2;'],
        ['latin1.txt', new Uint8Array([0x63, 0x61, 0x66, 0xe9])],
        ['cut.txt', new Uint8Array([0x61, 0xe2, 0x82])],
        ['nul.txt', new Uint8Array([0x61, 0x00, 0x62])],
        ['connector-profile:flex-x.json', '{}'],
        ['connector-profile:other.json', '{}'],
      ]),
      { versionName: 'checks', environmentName: 'test' },
    );
    assert.equal(answer.status, 200, answer.text);
    const reasons = Object.fromEntries(
      answer.body.ignoredResources.map((r: { name: string; reason: string }) => [r.name, r.reason]),
    );
    assert.equal(answer.body.ignoredResources.length, 14);
    assert.match(reasons['/etc/passwd'], /unsafe path: absolute/);
    assert.match(reasons['C:/windows/x.sql'], /unsafe path: absolute/);
    assert.match(reasons['../outside.sql'], /unsafe path/);
    assert.match(reasons['a/./b.sql'], /unsafe path/);
    assert.match(reasons['a//b.sql'], /unsafe path: empty segment/);
    assert.match(reasons['trailing/'], /unsafe path: empty segment/);
    assert.match(reasons['back\\slash.sql'], /backslash/);
    assert.match(reasons[''], /unsafe path: empty/);
    assert.match(reasons['ok/one.sql'], /duplicate path/);
    assert.match(reasons['latin1.txt'], /not UTF-8 text/);
    assert.match(reasons['cut.txt'], /not UTF-8 text/);
    assert.match(reasons['nul.txt'], /NUL/);
    assert.match(reasons['connector-profile:flex-x.json'], /content type/);
    assert.match(reasons['connector-profile:other.json'], /not a connector profile name/);
    assert.deepEqual((await details('test', 'checks')).body.assets, ['ok/one.sql']);
    assert.equal((await asset('test', 'checks', 'ok/one.sql')).text, 'select 1;', 'the first of repeated parts is kept');
  });

  test('a part without a filename is checked byte for byte like any other', async () => {
    const boundary = 'no-filename-boundary';
    const part = (name: string, content: Buffer) =>
      Buffer.concat([
        Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="${name}"\r\ncontent-type: text/plain\r\n\r\n`),
        content,
        Buffer.from('\r\n'),
      ]);
    const body = Buffer.concat([
      part('plain.sql', Buffer.from('select 3; -- café')),
      part('latin1.sql', Buffer.from([0x63, 0x61, 0x66, 0xe9])),
      Buffer.from(`--${boundary}--\r\n`),
    ]);
    const answer = await server.api('POST', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: new Uint8Array(body),
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}`, versionName: 'fields', environmentName: 'test' },
    });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body.ignoredResources, [{ name: 'latin1.sql', reason: 'not UTF-8 text' }]);
    assert.equal((await asset('test', 'fields', 'plain.sql')).text, 'select 3; -- café');
  });

  test('a connector profile that is not JSON, or a profile type under another name, is ignored', async () => {
    const form = new FormData();
    form.append('connector-profile:custom-broken.json', new Blob(['{not json'], { type: PROFILE_TYPE }), 'p.json');
    form.append('profiles/x.json', new Blob(['{}'], { type: PROFILE_TYPE }), 'x.json');
    const answer = await upload(form, { versionName: 'profiles', environmentName: 'test' });
    assert.equal(answer.status, 200);
    assert.deepEqual(answer.body.ignoredResources.map((r: { name: string }) => r.name).sort(), [
      'connector-profile:custom-broken.json',
      'profiles/x.json',
    ]);
    assert.deepEqual((await details('test', 'profiles')).body.assets, []);
  });

  test('headers: versionName and environmentName are required, named in the violations', async () => {
    const none = expectProblem(await upload(formOf([['a.sql', 'x']]), {}), 400, 'bad-request');
    assert.deepEqual(none.violations?.sort(), ['environmentName: is required', 'versionName: is required']);
    const badEnv = expectProblem(await upload(formOf([['a.sql', 'x']]), { versionName: 'v', environmentName: '-bad-' }), 400);
    assert.match(badEnv.violations![0], /^environmentName: /);
    expectProblem(await upload(formOf([['a.sql', 'x']]), { versionName: 'v', environmentName: 'nowhere' }), 404, 'not-found');
  });

  test('an URL-encoded environmentName header (as publishing tools send it) is decoded before it is checked', async () => {
    const name = 'Test (EU) 1';
    assert.equal(
      (await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name } })).status,
      201,
    );
    for (const [versionName, header] of [
      ['plus', 'Test+%28EU%29+1'],
      ['percent', 'Test%20(EU)%201'],
      ['plain', name],
    ]) {
      const answer = await upload(formOf([['a.sql', 'x']]), { versionName, environmentName: header });
      assert.equal(answer.status, 200, `${header}: ${answer.text}`);
      assert.equal((await details(name, versionName)).status, 200);
    }
    const bad = expectProblem(await upload(formOf([['a.sql', 'x']]), { versionName: 'v', environmentName: 'Test%zz' }), 400);
    assert.deepEqual(bad.violations, ['environmentName: not a valid URL encoding']);
  });

  test("details without versionName answer the latest enabled version; published pipelines list that version's pipelines", async () => {
    const env = 'latest-env';
    assert.equal(
      (await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: env } })).status,
      201,
    );
    const latest = () =>
      server.api('GET', `/projects/${projectId}/artifacts/details?environmentName=${env}`, { token: caller.token });
    const published = (query = '') =>
      server.api('GET', `/projects/${projectId}/published-pipelines?environmentName=${env}${query}`, { token: caller.token });
    expectProblem(await latest(), 404, 'not-found');
    assert.deepEqual((await published()).body, { page: 0, results: [], size: 25, total: 0 });

    const files: [string, string][] = [
      ['b/load.orch.yaml', 'type: orchestration'],
      ['a/shape.tran.yaml', 'type: transformation'],
      ['notes.yaml', 'x: 1'],
      ['UPPER.ORCH.YAML', 'x: 1'],
    ];
    assert.equal((await upload(formOf(files), { versionName: 'one', environmentName: env })).status, 200);
    assert.equal(
      (await upload(formOf([['c/only.orch.yaml', 'x: 1']]), { versionName: 'two', environmentName: env })).status,
      200,
    );
    assert.equal((await latest()).body.details.versionName, 'two');

    const disable = await server.api('PATCH', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: { environmentName: env, versionName: 'two', enabled: false },
    });
    assert.equal(disable.status, 200, disable.text);
    const one = await latest();
    assert.equal(one.body.details.versionName, 'one');
    const page = await published('&size=1');
    assert.equal(page.body.total, 2);
    assert.deepEqual(page.body.results, [{ name: 'a/shape.tran.yaml', publishedTime: one.body.details.deployedAt }]);
    assert.deepEqual(
      (await published('&page=1&size=1')).body.results.map((p: { name: string }) => p.name),
      ['b/load.orch.yaml'],
    );
    expectProblem(
      await server.api('GET', `/projects/${projectId}/published-pipelines?environmentName=nowhere`, { token: caller.token }),
      404,
    );
    expectProblem(await server.api('GET', `/projects/${projectId}/published-pipelines`, { token: caller.token }), 400);
  });

  test('the upload takes multipart only (415), and JSON operations still refuse multipart (415)', async () => {
    const json = await server.api('POST', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: { files: [] },
      headers: { versionName: 'v', environmentName: 'test' },
    });
    expectProblem(json, 415, 'unsupported-media-type');
    const form = new FormData();
    form.append('sourceEnvironmentName', 'test');
    expectProblem(
      await server.api('POST', `/projects/${projectId}/artifacts/promotions`, { token: caller.token, body: form }),
      415,
      'unsupported-media-type',
    );
  });

  test('roles: a viewer reads but cannot upload, promote or switch; a developer can', async () => {
    expectProblem(
      await upload(formOf([['a.sql', 'x']]), { versionName: 'roles', environmentName: 'test' }, viewer),
      403,
      'forbidden',
    );
    assert.equal(
      (await upload(formOf([['a.sql', 'x']]), { versionName: 'roles', environmentName: 'test' }, developer)).status,
      200,
    );
    assert.equal((await details('test', 'roles', viewer)).status, 200);
    assert.equal(
      (await server.api('GET', `/projects/${projectId}/artifacts?environmentName=test`, { token: viewer })).status,
      200,
    );
    const promotion = { sourceEnvironmentName: 'test', targetEnvironmentName: 'production', versionName: 'roles' };
    expectProblem(
      await server.api('POST', `/projects/${projectId}/artifacts/promotions`, { token: viewer, body: promotion }),
      403,
    );
    expectProblem(
      await server.api('PATCH', `/projects/${projectId}/artifacts`, {
        token: viewer,
        body: { environmentName: 'test', versionName: 'roles', enabled: false },
      }),
      403,
    );
  });

  test("another account's project answers 404 on every operation", async () => {
    const other = await server.newAccount('other');
    const q = new URLSearchParams({ environmentName: 'test', versionName: 'v1', path: 'README.md' });
    expectProblem(
      await upload(formOf([['a.sql', 'x']]), { versionName: 'x', environmentName: 'test' }, other.token),
      404,
      'not-found',
    );
    expectProblem(await server.api('GET', `/projects/${projectId}/artifacts?environmentName=test`, { token: other.token }), 404);
    expectProblem(await server.api('GET', `/projects/${projectId}/artifacts/details?${q}`, { token: other.token }), 404);
    expectProblem(await server.api('GET', `/projects/${projectId}/artifacts/assets?${q}`, { token: other.token }), 404);
    const promotion = { sourceEnvironmentName: 'test', targetEnvironmentName: 'production', versionName: 'v1' };
    expectProblem(
      await server.api('POST', `/projects/${projectId}/artifacts/promotions`, { token: other.token, body: promotion }),
      404,
    );
  });

  test("E11 lists an environment's artifacts paged, newest first; E12 answers 404 for an unknown version", async () => {
    const project = await server.newProject(caller);
    await server.api('POST', `/projects/${project}/environments`, { token: caller.token, body: { name: 'dev' } });
    for (const v of ['p1', 'p2', 'p3']) {
      assert.equal(
        (await upload(formOf([['a.sql', v]]), { versionName: v, environmentName: 'dev' }, caller.token, project)).status,
        200,
      );
    }
    const first = await server.api('GET', `/projects/${project}/artifacts?environmentName=dev&size=2`, { token: caller.token });
    assert.equal(first.status, 200);
    assert.equal(first.body.total, 3);
    assert.equal(first.body.size, 2);
    assert.deepEqual(
      first.body.results.map((r: { versionName: string }) => r.versionName),
      ['p3', 'p2'],
    );
    assert.deepEqual(Object.keys(first.body.results[0]).sort(), [
      'createdAt',
      'deployedAt',
      'enabled',
      'provider',
      'versionName',
    ]);
    const second = await server.api('GET', `/projects/${project}/artifacts?environmentName=dev&size=2&page=1`, {
      token: caller.token,
    });
    assert.deepEqual(
      second.body.results.map((r: { versionName: string }) => r.versionName),
      ['p1'],
    );
    const missing = expectProblem(await server.api('GET', `/projects/${project}/artifacts`, { token: caller.token }), 400);
    assert.deepEqual(missing.violations, ['environmentName: is required']);
    expectProblem(await details('test', 'never-uploaded'), 404, 'not-found');
    expectProblem(await details('no-such-env', 'v1'), 404, 'not-found');
  });

  test('promotion copies a version to another environment once; a repeat is 409', async () => {
    assert.equal(
      (
        await upload(
          formOf([
            ['p/a.sql', 'select 1;'],
            ['p/b.py', 'print(1)'],
          ]),
          { versionName: 'promo', environmentName: 'test', branch: 'main' },
        )
      ).status,
      200,
    );
    const body = { sourceEnvironmentName: 'test', targetEnvironmentName: 'production', versionName: 'promo' };
    const promoted = await server.api('POST', `/projects/${projectId}/artifacts/promotions`, { token: caller.token, body });
    assert.equal(promoted.status, 200, promoted.text);
    assert.deepEqual(promoted.body, { environmentName: 'production', versionName: 'promo' });
    const source = (await details('test', 'promo')).body;
    const target = (await details('production', 'promo')).body;
    assert.deepEqual(target.assets, ['p/a.sql', 'p/b.py']);
    assert.equal(target.details.provider, 'promotion');
    assert.equal(target.details.branch, 'main');
    assert.equal(target.details.createdAt, source.details.createdAt);
    assert.ok(target.details.deployedAt >= source.details.deployedAt);
    assert.equal((await asset('production', 'promo', 'p/b.py')).text, 'print(1)');
    expectProblem(
      await server.api('POST', `/projects/${projectId}/artifacts/promotions`, { token: caller.token, body }),
      409,
      'conflict',
    );
    expectProblem(
      await server.api('POST', `/projects/${projectId}/artifacts/promotions`, {
        token: caller.token,
        body: { ...body, versionName: 'unknown' },
      }),
      404,
    );
    expectProblem(
      await server.api('POST', `/projects/${projectId}/artifacts/promotions`, {
        token: caller.token,
        body: { ...body, targetEnvironmentName: 'nowhere' },
      }),
      404,
    );
  });

  test('a version can be disabled and enabled again', async () => {
    assert.equal((await upload(formOf([['a.sql', 'x']]), { versionName: 'switch', environmentName: 'test' })).status, 200);
    const off = await server.api('PATCH', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: { environmentName: 'test', versionName: 'switch', enabled: false },
    });
    assert.equal(off.status, 200);
    assert.deepEqual(off.body, { enabled: false, versionName: 'switch' });
    assert.equal((await details('test', 'switch')).body.details.enabled, false);
    await server.api('PATCH', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: { environmentName: 'test', versionName: 'switch', enabled: true },
    });
    assert.equal((await details('test', 'switch')).body.details.enabled, true);
    expectProblem(
      await server.api('PATCH', `/projects/${projectId}/artifacts`, {
        token: caller.token,
        body: { environmentName: 'test', versionName: 'nope', enabled: true },
      }),
      404,
    );
  });

  test('a body cut off midway stores nothing, and the version stays free', async () => {
    const files: ProjectFile[] = Array.from({ length: 50 }, (_, i) => [`f/${i}.sql`, `select ${i};\n`.repeat(200)]);
    const request = new Request('http://x', { method: 'POST', body: formOf(files) });
    const body = Buffer.from(await request.arrayBuffer());
    const contentType = request.headers.get('content-type')!;
    const url = new URL(`${server.url}/dpc/v1/projects/${projectId}/artifacts`);

    // The client goes away after half of the body.
    await new Promise<void>((resolve) => {
      const req = http.request(url, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${caller.token}`,
          'content-type': contentType,
          'content-length': body.length,
          versionName: 'cut',
          environmentName: 'test',
        },
      });
      req.on('error', () => resolve());
      req.on('close', () => resolve());
      req.write(body.subarray(0, body.length >> 1), () => setTimeout(() => req.destroy(), 100));
    });
    // A body that ends cleanly but before the closing boundary: 400.
    const between = body.indexOf(Buffer.from(`\r\n--${contentType.split('boundary=')[1]}`), body.length >> 1);
    const truncated = await fetch(url, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${caller.token}`,
        'content-type': contentType,
        versionName: 'cut',
        environmentName: 'test',
      },
      body: body.subarray(0, between),
    });
    expectProblem(
      { status: truncated.status, headers: truncated.headers, body: await truncated.json(), text: '' },
      400,
      'bad-request',
    );

    await new Promise((resolve) => setTimeout(resolve, 200));
    expectProblem(await details('test', 'cut'), 404);
    const count = await server.db
      .selectFrom('artifacts')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('versionName', '=', 'cut')
      .executeTakeFirstOrThrow();
    assert.equal(Number(count.n), 0);
    const whole = await upload(formOf(files), { versionName: 'cut', environmentName: 'test' });
    assert.equal(whole.status, 200);
    assert.equal((await details('test', 'cut')).body.assets.length, 50);
  });

  test('deleting an environment or a project removes its artifacts', async () => {
    const project = await server.newProject(caller);
    await server.api('POST', `/projects/${project}/environments`, { token: caller.token, body: { name: 'gone' } });
    assert.equal(
      (await upload(formOf([['a.sql', 'x']]), { versionName: 'v', environmentName: 'gone' }, caller.token, project)).status,
      200,
    );
    assert.equal((await server.api('DELETE', `/projects/${project}/environments/gone`, { token: caller.token })).status, 204);
    const project2 = await server.newProject(caller);
    await server.api('POST', `/projects/${project2}/environments`, { token: caller.token, body: { name: 'dev' } });
    assert.equal(
      (await upload(formOf([['a.sql', 'x']]), { versionName: 'v', environmentName: 'dev' }, caller.token, project2)).status,
      200,
    );
    assert.equal((await server.api('DELETE', `/projects/${project2}`, { token: caller.token })).status, 204);
    const left = await server.db.selectFrom('artifacts').select('id').where('projectId', 'in', [project, project2]).execute();
    assert.equal(left.length, 0);
  });

  test('the OpenAPI document shows the upload with its headers and examples', async () => {
    const doc = (await server.request('GET', '/dpc/openapi.json')).body;
    const operation = doc.paths['/dpc/v1/projects/{projectId}/artifacts'].post;
    assert.ok(operation.requestBody.content['multipart/form-data']);
    const headers = operation.parameters
      .filter((p: { in: string }) => p.in === 'header')
      .map((p: { name: string; required: boolean }) => `${p.name}:${p.required}`);
    // Idempotency-Key is every POST's (core/idempotency.ts).
    assert.deepEqual(headers.sort(), [
      'Idempotency-Key:false',
      'branch:false',
      'commitHash:false',
      'environmentName:true',
      'versionName:true',
    ]);
    assert.ok(operation.responses['413'] && operation.responses['409']);
  });
});

describeEachStore('artifact upload limits', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind, { uploadMaxParts: 3, uploadMaxPartBytes: 1000, uploadMaxBytes: 2500 });
    ({ caller, projectId } = await server.prologue({ environments: ['test'] }));
  });
  after(() => server.close());

  const upload = (files: ProjectFile[], versionName: string) =>
    server.api('POST', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: formOf(files),
      headers: { versionName, environmentName: 'test' },
    });

  test('too many parts, too large a part, too large an upload: 413, nothing stored', async () => {
    expectProblem(
      await upload(
        [
          ['a', 'x'],
          ['b', 'x'],
          ['c', 'x'],
          ['d', 'x'],
        ],
        'parts',
      ),
      413,
      'payload-too-large',
    );
    const tooLargePart = await upload(
      [
        ['small.txt', 'x'],
        ['pipelines/large.orch.yaml', 'x'.repeat(1001)],
      ],
      'part',
    );
    expectProblem(tooLargePart, 413, 'payload-too-large');
    assert.match(tooLargePart.body.detail, /"pipelines\/large\.orch\.yaml"/);
    expectProblem(
      await upload(
        [
          ['a', 'x'.repeat(900)],
          ['b', 'x'.repeat(900)],
          ['c', 'x'.repeat(900)],
        ],
        'total',
      ),
      413,
      'payload-too-large',
    );
    const stored = await server.db.selectFrom('artifacts').select('versionName').execute();
    assert.deepEqual(stored, []);
    // At the limits exactly, the upload goes through.
    const ok = await upload(
      [
        ['a', 'x'.repeat(1000)],
        ['b', 'x'.repeat(1000)],
        ['c', 'x'.repeat(500)],
      ],
      'fits',
    );
    assert.equal(ok.status, 200, ok.text);
  });
});

describeEachStore('upload slots', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind, { uploadConcurrency: 1, uploadQueueTimeoutMs: 1000 });
    ({ caller, projectId } = await server.prologue({ environments: ['test'] }));
  });
  after(() => server.close());

  const BOUNDARY = 'slots-boundary';
  const part = (name: string) =>
    `--${BOUNDARY}\r\ncontent-disposition: form-data; name="${name}"; filename="f"\r\ncontent-type: text/plain\r\n\r\nselect 1;\r\n`;

  /** An upload whose body is sent up to its first part, then held until `finish` is called. */
  function heldUpload(versionName: string) {
    const request = http.request(`${server.url}/dpc/v1/projects/${projectId}/artifacts`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${caller.token}`,
        'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
        versionName,
        environmentName: 'test',
      },
    });
    const answer = new Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }>((resolve, reject) => {
      request.on('response', (response) => {
        let text = '';
        response.on('data', (chunk) => (text += chunk));
        response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, text }));
      });
      request.on('error', reject);
    });
    request.write(part('a.sql'));
    return { answer, finish: () => request.end(`${part('b.sql')}--${BOUNDARY}--\r\n`) };
  }
  const settle = () => new Promise((resolve) => setTimeout(resolve, 300));
  /** Until an upload holds the slot: its staging folder appears once it does (however loaded the machine). */
  async function slotTaken() {
    const stagingDir = path.join(server.config.dataDir, 'staging');
    while (readdirSync(stagingDir).length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  test('an upload past the concurrency waits for a slot, with its body unread', async () => {
    const first = heldUpload('first');
    await slotTaken(); // the first takes the only slot
    const second = heldUpload('second');
    second.finish(); // whole, yet not read before the first is done
    await settle();
    assert.equal(readdirSync(path.join(server.config.dataDir, 'staging')).length, 1, 'the second is not staged while it waits');
    first.finish();
    for (const answer of await Promise.all([first.answer, second.answer])) assert.equal(answer.status, 200, answer.text);
    // The slot is given back once the first is committed, so the second is committed after it (their answers
    // may still cross on the wire).
    const committed = await server.db
      .selectFrom('artifacts')
      .select(['versionName', 'createdAt'])
      .where('versionName', 'in', ['first', 'second'])
      .orderBy('createdAt')
      .orderBy('id')
      .execute();
    assert.deepEqual(
      committed.map((row) => row.versionName),
      ['first', 'second'],
    );
  });

  test('one that waits past the queue timeout answers 503 with Retry-After; nothing is stored', async () => {
    const held = heldUpload('held');
    await slotTaken();
    const waiting = heldUpload('waiting');
    waiting.finish();
    const refused = await waiting.answer;
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.headers['retry-after'], '5');
    assert.match(refused.headers['content-type'] ?? '', /^application\/problem\+json/);
    held.finish();
    assert.equal((await held.answer).status, 200);
    const stored = await server.db.selectFrom('artifacts').select('versionName').where('versionName', '=', 'waiting').execute();
    assert.deepEqual(stored, []);
    // The slot is free again.
    const after = heldUpload('after');
    after.finish();
    assert.equal((await after.answer).status, 200);
  });
});
