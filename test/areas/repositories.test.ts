import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { basicAuthEnv } from '../../src/areas/repositories/git.ts';
import {
  describeEachStore,
  describeOnPostgres,
  expectProblem,
  scratchStore,
  TestServer,
  type Caller,
} from '../helpers/harness.ts';
import { git, GitTarget, refsOf, workingRepository } from '../helpers/git-target.ts';
import { hostedRepositoryPath } from '../../src/areas/repositories/hosting.ts';
import { runDpc, spawnServe } from '../helpers/processes.ts';

const BRANCHES = ['main', 'feature/login', 'release-1.0', 'fix'];
// Enough tags that git gzips its fetch requests (over 1 KiB of wants).
const TAGS = Array.from({ length: 30 }, (_, i) => `v1.${i}`);
const auth = (token: string) => basicAuthEnv('git', token);

interface MigrationStart {
  mode: string;
  targetCloneUrl: string;
  targetProvider: string;
  targetName?: string;
  targetEnterpriseOauthId?: string;
  providerParameters?: Record<string, string>;
}

/** Polls E29 until the migration is no longer IN_PROGRESS (or UNKNOWN); its last answer. */
async function settled(url: string, token: string, projectId: string, migrationId: string) {
  for (let i = 0; i < 300; i += 1) {
    const response = await fetch(`${url}/dpc/v1/projects/${projectId}/repository-migration/${migrationId}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    const body = (await response.json()) as { migrationId: string; status: string; detail?: string };
    assert.equal(response.status, 200, JSON.stringify(body));
    if (body.status !== 'IN_PROGRESS' && body.status !== 'UNKNOWN') return body;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`migration ${migrationId} did not end`);
}

describeEachStore('project Git repositories and their migration', (kind) => {
  let server: TestServer;
  let target: GitTarget;
  let caller: Caller;
  let developer: string;
  let viewer: string;
  let work: string;
  before(async () => {
    target = await GitTarget.start();
    server = await TestServer.start(kind, { outboundAllowedRanges: ['127.0.0.0/8'], gitlabApiUrl: target.url });
    caller = await server.newAccount();
    developer = await server.tokenFor(caller.accountId, 'developer');
    viewer = await server.tokenFor(caller.accountId, 'viewer');
    work = workingRepository(BRANCHES, TAGS);
  });
  after(async () => {
    await server.close();
    await target.close();
    rmSync(work, { recursive: true, force: true });
  });

  const hostedUrl = (projectId: string) => `${server.url}/dpc/git/${projectId}.git`;
  const pushAll = (url: string, token: string) =>
    git(['push', '--quiet', url, 'refs/heads/*:refs/heads/*', 'refs/tags/*:refs/tags/*'], work, auth(token));
  const start = (projectId: string, body: MigrationStart, options: { token?: string; headers?: Record<string, string> } = {}) =>
    server.api('POST', `/projects/${projectId}/repository-migration`, {
      token: options.token ?? caller.token,
      headers: options.headers,
      body: { targetName: 'target', ...body },
    });
  async function connection(token: string, provider = 'github'): Promise<string> {
    const answer = await server.api('POST', '/enterprise-oauth-connections', {
      token: caller.token,
      body: { name: `conn ${randomUUID()}`, provider, type: 'TOKEN', token },
    });
    assert.equal(answer.status, 201, answer.text);
    return answer.body.id;
  }
  /** A project whose hosted repository holds the working repository's branches and tags. */
  async function projectWithHistory(): Promise<string> {
    const projectId = await server.newProject(caller);
    await pushAll(hostedUrl(projectId), developer);
    return projectId;
  }
  async function migrate(projectId: string, body: MigrationStart, headers?: Record<string, string>) {
    const started = await start(projectId, body, { headers });
    assert.equal(started.status, 202, started.text);
    return settled(server.url, caller.token, projectId, started.body.migrationId);
  }

  test("deleting a project removes its hosted repository from the server's disk", async () => {
    const projectId = await projectWithHistory();
    const folder = hostedRepositoryPath(server.config, projectId);
    assert.ok(existsSync(folder));
    assert.equal((await server.api('DELETE', `/projects/${projectId}`, { token: caller.token })).status, 204);
    assert.ok(!existsSync(folder), 'the repository outlived its project');
  });

  test('a hosted repository is served over smart HTTP: developers push, viewers fetch, other accounts and bad tokens are refused', async () => {
    const projectId = await server.newProject(caller);
    const repository = await server.api('GET', `/projects/${projectId}/git-repository`, { token: viewer });
    assert.equal(repository.status, 200, repository.text);
    assert.deepEqual(repository.body, { hosted: true, cloneUrl: hostedUrl(projectId) });

    await pushAll(hostedUrl(projectId), developer);
    assert.deepEqual(await refsOf(hostedUrl(projectId), auth(viewer)), await refsOf(work));
    const clone = mkdtempSync(path.join(tmpdir(), 'dpc-clone-'));
    try {
      // A mirror clone asks for every ref: its request is gzipped, which git http-backend must inflate.
      await git(['clone', '--quiet', '--mirror', hostedUrl(projectId), clone], undefined, auth(viewer));
      assert.deepEqual(await refsOf(clone), await refsOf(work));
    } finally {
      rmSync(clone, { recursive: true, force: true });
    }

    await assert.rejects(git(['push', hostedUrl(projectId), 'main:refs/heads/viewer'], work, auth(viewer)), /403/);
    await assert.rejects(
      git(['ls-remote', hostedUrl(projectId)], undefined, auth('not-a-token')),
      /Authentication failed|401|could not read Username/,
    );
    await assert.rejects(git(['ls-remote', hostedUrl(projectId)]), /Authentication failed|401|could not read Username/);
    const stranger = await server.newAccount('stranger');
    await assert.rejects(git(['ls-remote', hostedUrl(projectId)], undefined, auth(stranger.token)), /not found|404/);

    const bare = await fetch(`${hostedUrl(projectId)}/info/refs?service=git-upload-pack`);
    expectProblem({ status: bare.status, headers: bare.headers, body: await bare.json(), text: '' }, 401);
    assert.match(bare.headers.get('www-authenticate') ?? '', /^Basic /);
    const unknown = await fetch(`${server.url}/dpc/git/not-a-project.git/info/refs`, {
      headers: { authorization: `Basic ${Buffer.from(`x:${viewer}`).toString('base64')}` },
    });
    assert.equal(unknown.status, 404);
  });

  test('enterprise OAuth connections are created and listed by the account; their secrets are sealed and never answered', async () => {
    const created = await server.api('POST', '/enterprise-oauth-connections', {
      token: caller.token,
      body: { name: 'gitlab service account', provider: 'gitlab', type: 'TOKEN', token: 'glpat-very-secret' },
    });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.body.provider, 'gitlab');
    assert.ok(!created.text.includes('glpat-very-secret'));
    const app = await server.api('POST', '/enterprise-oauth-connections', {
      token: caller.token,
      body: { name: 'azure app', provider: 'azure-devops', type: 'APP', clientId: 'app-id', clientSecret: 'app-secret-value' },
    });
    assert.equal(app.status, 201, app.text);
    assert.equal(app.body.clientId, 'app-id');

    const listed = await server.api('GET', '/enterprise-oauth-connections', { token: viewer });
    assert.equal(listed.status, 200);
    const mine = listed.body.filter((c: { id: string }) => [created.body.id, app.body.id].includes(c.id));
    assert.deepEqual(
      mine.map((c: { name: string; type: string }) => [c.name, c.type]),
      [
        ['gitlab service account', 'TOKEN'],
        ['azure app', 'APP'],
      ],
    );
    assert.ok(!listed.text.includes('glpat-very-secret') && !listed.text.includes('app-secret-value'));
    const rows = await server.db.selectFrom('gitCredentials').select('sealedSecret').execute();
    assert.ok(rows.every((row) => !row.sealedSecret.includes('secret')));
    const other = await server.newAccount('other');
    const theirs = await server.api('GET', '/enterprise-oauth-connections', { token: other.token });
    assert.deepEqual(theirs.body, []);

    const duplicate = await server.api('POST', '/enterprise-oauth-connections', {
      token: caller.token,
      body: { name: 'gitlab service account', provider: 'gitlab', type: 'TOKEN', token: 'x' },
    });
    expectProblem(duplicate, 409);
    const noClient = await server.api('POST', '/enterprise-oauth-connections', {
      token: caller.token,
      body: { name: 'broken app', provider: 'github', type: 'APP', clientSecret: 's', token: 't' },
    });
    const problem = expectProblem(noClient, 400);
    assert.deepEqual(problem.violations?.sort(), [
      'body.clientId: required for type APP',
      'body.token: not allowed for type APP',
    ]);
    expectProblem(
      await server.api('POST', '/enterprise-oauth-connections', {
        token: caller.token,
        body: { name: 'x', provider: 'bitbucket', type: 'TOKEN', token: 't' },
      }),
      400,
    );
    expectProblem(
      await server.api('POST', '/enterprise-oauth-connections', {
        token: developer,
        body: { name: 'y', provider: 'github', type: 'TOKEN', token: 't' },
      }),
      403,
    );
    expectProblem(await server.api('DELETE', `/enterprise-oauth-connections/${app.body.id}`, { token: other.token }), 404);
    assert.equal(
      (await server.api('DELETE', `/enterprise-oauth-connections/${app.body.id}`, { token: caller.token })).status,
      204,
    );
  });

  test('a project can be associated with an external repository; the server then no longer serves it', async () => {
    const projectId = await server.newProject(caller);
    const credential = await connection('tok', 'gitlab');
    const put = (body: unknown, token = caller.token) =>
      server.api('PUT', `/projects/${projectId}/git-repository`, { token, body });
    const external = { cloneUrl: 'https://gitlab.example.com/data/pipelines.git', provider: 'gitlab', name: 'pipelines' };
    const answer = await put({ ...external, enterpriseOauthId: credential });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(answer.body, { hosted: false, ...external, enterpriseOauthId: credential });
    assert.deepEqual((await server.api('GET', `/projects/${projectId}/git-repository`, { token: viewer })).body, answer.body);

    expectProblem(await put({ ...external, cloneUrl: 'ftp://example.com/x.git' }), 400);
    expectProblem(await put({ ...external, cloneUrl: 'https://user:pw@example.com/x.git' }), 400);
    expectProblem(await put({ ...external, cloneUrl: 'https://example.com/my repo.git' }), 400);
    expectProblem(await put({ ...external, cloneUrl: 'https://example.com/x.git?access_token=abc123' }), 400);
    const wrongProvider = expectProblem(await put({ ...external, provider: 'github', enterpriseOauthId: credential }), 400);
    assert.match(wrongProvider.detail, /is for gitlab, not github/);
    expectProblem(await put({ ...external, enterpriseOauthId: randomUUID() }), 404);
    expectProblem(await put(external, developer), 403);
    await assert.rejects(git(['ls-remote', hostedUrl(projectId)], undefined, auth(viewer)), /409|no longer hosts/);
  });

  test('E28 checks its rules, each with its status and a detail naming the rule', async () => {
    const projectId = await server.newProject(caller);
    const github = { mode: 'MIRROR_PUSH', targetCloneUrl: `${target.url}/rules.git`, targetProvider: 'github' };

    expectProblem(await start(projectId, { ...github, mode: 'COPY' }), 400);
    expectProblem(await start(projectId, { ...github, targetProvider: 'bitbucket' }), 400);
    expectProblem(await start(projectId, { ...github, targetCloneUrl: 'not a url' }), 400);
    // Spaces and control characters the URL parser would quietly encode or drop; credentials in the query (issue 36).
    for (const url of [
      `${target.url}/a b.git`,
      `${target.url}/a\tb.git`,
      `${target.url}/ab.git\n`,
      `${target.url}/a\u0007b.git`,
      `${target.url}/a\u007fb.git`,
    ]) {
      const problem = expectProblem(await start(projectId, { ...github, targetCloneUrl: url }), 400);
      assert.deepEqual(problem.violations, [
        'body.targetCloneUrl: must not contain spaces or control characters (percent-encode them)',
      ]);
    }
    const leaky = await start(projectId, { ...github, targetCloneUrl: `${target.url}/x.git?private_token=leak-value-1` });
    assert.match(expectProblem(leaky, 400).violations!.join(), /^body\.targetCloneUrl: holds a credential/);
    assert.ok(!leaky.text.includes('leak-value-1'));
    for (const same of [hostedUrl(projectId), `${hostedUrl(projectId)}/`, hostedUrl(projectId).replace('.git', '')]) {
      const problem = expectProblem(await start(projectId, { ...github, targetCloneUrl: same }), 400);
      assert.match(problem.detail, /current repository/);
    }
    const azure = expectProblem(
      await start(projectId, { ...github, targetProvider: 'azure-devops', providerParameters: { organization: 'o' } }),
      400,
    );
    assert.deepEqual(azure.violations, [
      'body.providerParameters.repositoryId: required for azure-devops',
      'body.providerParameters.tenantId: required for azure-devops',
    ]);
    const tokenAsId = expectProblem(
      await start(projectId, {
        ...github,
        targetProvider: 'azure-devops',
        providerParameters: { organization: 'o', repositoryId: 'Bearer leak-value-2abc', tenantId: 't' },
      }),
      400,
    );
    assert.match(tokenAsId.violations!.join(), /^body\.providerParameters\.repositoryId: holds a credential/);
    assert.ok(!JSON.stringify(tokenAsId).includes('leak-value-2'));
    const extra = expectProblem(await start(projectId, { ...github, providerParameters: { repositoryId: '1' } }), 400);
    assert.deepEqual(extra.violations, ['body.providerParameters.repositoryId: not a parameter of github']);
    const gitlab = { ...github, targetProvider: 'gitlab', providerParameters: { repositoryId: '1' } };
    const noToken = expectProblem(await start(projectId, gitlab), 400);
    assert.match(noToken.detail, /Git-Provider-Access-Token/);
    const wrongConnection = expectProblem(
      await start(projectId, { ...github, targetEnterpriseOauthId: await connection('t', 'gitlab') }),
      400,
    );
    assert.match(wrongConnection.detail, /is for gitlab, not github/);

    expectProblem(await start(projectId, github, { token: developer }), 403);
    expectProblem(await start(projectId, github, { token: viewer }), 403);
    expectProblem(await start(randomUUID(), github), 404);
    const stranger = await server.newAccount('stranger');
    expectProblem(await start(projectId, github, { token: stranger.token }), 404);
    expectProblem(
      await server.api('GET', `/projects/${projectId}/repository-migration/${randomUUID()}`, { token: caller.token }),
      404,
    );

    // An external project: its own URL, however written, is not a target.
    const external = await server.newProject(caller);
    await server.api('PUT', `/projects/${external}/git-repository`, {
      token: caller.token,
      body: { cloneUrl: 'https://GitHub.com/acme/data.git', provider: 'github' },
    });
    expectProblem(await start(external, { ...github, targetCloneUrl: 'https://github.com/acme/data' }), 400);
  });

  test('one migration at a time: a second start while one is IN_PROGRESS is 409, and so are pushes to the repository', async () => {
    const projectId = await projectWithHistory();
    const token = target.newToken();
    const body = {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: target.createRepository(`busy-${projectId}`),
      targetProvider: 'github',
      targetEnterpriseOauthId: await connection(token),
    };
    target.hold();
    try {
      const first = await start(projectId, body);
      assert.equal(first.status, 202, first.text);
      await target.reached;
      const second = expectProblem(await start(projectId, body), 409, 'migration-in-progress');
      assert.match(second.detail, /already in progress/);
      await assert.rejects(git(['push', hostedUrl(projectId), 'main:refs/heads/late'], work, auth(developer)), /409/);
      expectProblem(
        await server.api('PUT', `/projects/${projectId}/git-repository`, {
          token: caller.token,
          body: { cloneUrl: 'https://github.com/acme/x.git', provider: 'github' },
        }),
        409,
        'migration-in-progress',
      );
      // Reading goes on.
      assert.deepEqual(await refsOf(hostedUrl(projectId), auth(viewer)), await refsOf(work));
      const status = await server.api('GET', `/projects/${projectId}/repository-migration/${first.body.migrationId}`, {
        token: caller.token,
      });
      assert.deepEqual(status.body, { migrationId: first.body.migrationId, status: 'IN_PROGRESS' });
      target.unhold();
      assert.equal((await settled(server.url, caller.token, projectId, first.body.migrationId)).status, 'COMPLETED');
    } finally {
      target.unhold();
    }
  });

  test('MIRROR_PUSH copies every branch and tag to an empty target and points the project at it', async () => {
    const projectId = await projectWithHistory();
    const token = target.newToken();
    const cloneUrl = target.createRepository(`mirror-${projectId}`);
    const credential = await connection(token);
    const result = await migrate(projectId, {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: cloneUrl,
      targetProvider: 'github',
      targetName: 'mirror',
      targetEnterpriseOauthId: credential,
    });
    assert.equal(result.status, 'COMPLETED', result.detail);
    assert.equal(result.detail, undefined);
    assert.deepEqual(await refsOf(target.pathOf(`mirror-${projectId}`)), await refsOf(work));
    assert.equal((await refsOf(work)).length, BRANCHES.length + TAGS.length);
    const repository = await server.api('GET', `/projects/${projectId}/git-repository`, { token: viewer });
    assert.deepEqual(repository.body, {
      hosted: false,
      cloneUrl,
      provider: 'github',
      name: 'mirror',
      enterpriseOauthId: credential,
    });
    await assert.rejects(git(['push', hostedUrl(projectId), 'main:refs/heads/after'], work, auth(developer)), /409/);

    // From the external repository on to another one: the source is read with its connection's token.
    const next = target.createRepository(`mirror-next-${projectId}`);
    const onward = await migrate(projectId, {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: next,
      targetProvider: 'github',
      targetEnterpriseOauthId: credential,
    });
    assert.equal(onward.status, 'COMPLETED', onward.detail);
    assert.deepEqual(await refsOf(target.pathOf(`mirror-next-${projectId}`)), await refsOf(work));
  });

  test('MIRROR_PUSH fails, leaving the project where it was, for a target holding refs or a refused token', async () => {
    const projectId = await projectWithHistory();
    const token = target.newToken();
    const credential = await connection(token);
    const occupied = target.createRepository(`occupied-${projectId}`);
    await git(['push', '--quiet', target.pathOf(`occupied-${projectId}`), 'main:refs/heads/theirs'], work);
    const full = await migrate(projectId, {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: occupied,
      targetProvider: 'github',
      targetEnterpriseOauthId: credential,
    });
    assert.equal(full.status, 'FAILED');
    assert.match(full.detail ?? '', /MIRROR_PUSH needs an empty target.*refs\/heads\/theirs/);
    assert.deepEqual(await refsOf(target.pathOf(`occupied-${projectId}`)), [
      (await refsOf(work)).find((r) => r.startsWith('refs/heads/main '))!.replace('main', 'theirs'),
    ]);

    const refused = await migrate(projectId, {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: target.createRepository(`refused-${projectId}`),
      targetProvider: 'github',
      targetEnterpriseOauthId: await connection('wrong-token'),
    });
    assert.equal(refused.status, 'FAILED');
    assert.match(refused.detail ?? '', /git ls-remote failed: .*(Authentication failed|401|could not read)/);
    const repository = await server.api('GET', `/projects/${projectId}/git-repository`, { token: viewer });
    assert.equal(repository.body.hosted, true);
    // The project's repository is writable again once the migration ended.
    await git(['push', '--quiet', hostedUrl(projectId), 'main:refs/heads/after-failure'], work, auth(developer));
  });

  test('RECONFIGURE points the project at a target holding every branch, and fails naming the missing ones', async () => {
    const projectId = await projectWithHistory();
    const token = target.newToken();
    const credential = await connection(token);
    const partial = target.createRepository(`partial-${projectId}`);
    await git(['push', '--quiet', target.pathOf(`partial-${projectId}`), 'main', 'fix'], work);
    const incomplete = await migrate(projectId, {
      mode: 'RECONFIGURE',
      targetCloneUrl: partial,
      targetProvider: 'github',
      targetEnterpriseOauthId: credential,
    });
    assert.equal(incomplete.status, 'FAILED');
    assert.match(incomplete.detail ?? '', /RECONFIGURE needs every branch.*missing: feature\/login, release-1\.0$/);
    assert.equal((await server.api('GET', `/projects/${projectId}/git-repository`, { token: viewer })).body.hosted, true);

    const complete = target.createRepository(`complete-${projectId}`);
    await git(['push', '--quiet', target.pathOf(`complete-${projectId}`), 'refs/heads/*:refs/heads/*'], work);
    const before = await refsOf(target.pathOf(`complete-${projectId}`));
    const done = await migrate(projectId, {
      mode: 'RECONFIGURE',
      targetCloneUrl: complete,
      targetProvider: 'github',
      targetEnterpriseOauthId: credential,
    });
    assert.equal(done.status, 'COMPLETED', done.detail);
    // Nothing copied: the tags stay where they were.
    assert.deepEqual(await refsOf(target.pathOf(`complete-${projectId}`)), before);
    assert.equal((await server.api('GET', `/projects/${projectId}/git-repository`, { token: viewer })).body.cloneUrl, complete);
  });

  test('a gitlab target: the supplied token is rotated at once and revoked; the same token fails a second time', async () => {
    const projectId = await projectWithHistory();
    const original = target.newToken();
    const cloneUrl = target.createRepository(`gitlab-${projectId}`);
    const body = {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: cloneUrl,
      targetProvider: 'gitlab',
      providerParameters: { repositoryId: '17' },
    };
    const result = await migrate(projectId, body, { 'git-provider-access-token': original });
    assert.equal(result.status, 'COMPLETED', result.detail);
    assert.deepEqual(target.rotations.slice(-1), [original]);
    assert.ok(!target.tokens.has(original), 'the original token is revoked');
    assert.deepEqual(await refsOf(target.pathOf(`gitlab-${projectId}`)), await refsOf(work));
    // The rotated token is what the server keeps, sealed.
    const rotated = [...target.tokens].at(-1)!;
    const stored = await server.db
      .selectFrom('projectRepositories')
      .selectAll()
      .where('projectId', '=', projectId)
      .executeTakeFirstOrThrow();
    assert.ok(stored.sealedToken && !stored.sealedToken.includes(rotated) && !stored.sealedToken.includes(original));
    const migrations = await server.db.selectFrom('repositoryMigrations').select('sealedToken').execute();
    assert.ok(migrations.every((m) => m.sealedToken === null));
    // ... and reads the new repository with it: a further migration from there works.
    const onward = target.createRepository(`gitlab-next-${projectId}`);
    const next = await migrate(projectId, {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: onward,
      targetProvider: 'github',
      targetEnterpriseOauthId: await connection(target.newToken()),
    });
    assert.equal(next.status, 'COMPLETED', next.detail);

    const again = await server.newProject(caller);
    const retry = await migrate(
      again,
      { ...body, targetCloneUrl: target.createRepository(`gitlab-again-${again}`) },
      {
        'git-provider-access-token': original,
      },
    );
    assert.equal(retry.status, 'FAILED');
    assert.match(retry.detail ?? '', /GitLab refused to rotate the Git-Provider-Access-Token: HTTP 401/);
  });

  test('a stored status the server cannot name is answered UNKNOWN', async () => {
    const projectId = await server.newProject(caller);
    const id = randomUUID();
    await server.db
      .insertInto('repositoryMigrations')
      .values({
        id,
        projectId,
        mode: 'MIRROR_PUSH',
        targetCloneUrl: 'https://example.com/x.git',
        targetProvider: 'github',
        targetName: 'x',
        gitCredentialId: null,
        providerParameters: '{}',
        sealedToken: null,
        tokenRotated: 0,
        phase: 'PUSHING',
        status: 'VERIFYING',
        detail: null,
        createdAt: new Date().toISOString(),
        finishedAt: null,
      })
      .execute();
    const answer = await server.api('GET', `/projects/${projectId}/repository-migration/${id}`, { token: caller.token });
    assert.deepEqual(answer.body, { migrationId: id, status: 'UNKNOWN' });
  });
});

describeOnPostgres('repository migration started on two server instances at once', () => {
  let first: TestServer;
  let second: TestServer;
  let target: GitTarget;
  before(async () => {
    target = await GitTarget.start();
    first = await TestServer.start('postgres', { outboundAllowedRanges: ['127.0.0.0/8'] });
    second = await TestServer.startBeside(first);
  });
  after(async () => {
    await second.close();
    await first.close();
    await target.close();
  });

  test('exactly one of two simultaneous starts wins; the other is 409', async () => {
    const caller = await first.newAccount();
    const connection = await first.api('POST', '/enterprise-oauth-connections', {
      token: caller.token,
      body: { name: 'race target', provider: 'github', type: 'TOKEN', token: target.newToken() },
    });
    assert.equal(connection.status, 201, connection.text);
    for (let round = 0; round < 5; round += 1) {
      const projectId = await first.newProject(caller);
      const body = {
        mode: 'RECONFIGURE',
        targetCloneUrl: target.createRepository(`race-${projectId}`),
        targetProvider: 'github',
        targetName: 'race',
        targetEnterpriseOauthId: connection.body.id,
      };
      target.hold();
      const answers = await Promise.all(
        [first, second].map((server) =>
          server.api('POST', `/projects/${projectId}/repository-migration`, { token: caller.token, body }),
        ),
      );
      assert.deepEqual(answers.map((a) => a.status).sort(), [202, 409], answers.map((a) => a.text).join(' '));
      expectProblem(
        answers.find((a) => a.status === 409)!,
        409,
        'migration-in-progress',
      );
      target.unhold();
      const winner = answers.find((a) => a.status === 202)!;
      // The target is empty: the project's (empty) hosted repository has no branch it lacks.
      const result = await settled(second.url, caller.token, projectId, winner.body.migrationId);
      assert.equal(result.status, 'COMPLETED', result.detail);
    }
  });
});

describeEachStore('repository migration interrupted by a server kill', (kind) => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  let target: GitTarget;
  let work: string;
  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    target = await GitTarget.start();
    work = workingRepository(BRANCHES, TAGS);
    env = {
      DPC_DATA_DIR: scratch.settings.dataDir ?? '',
      DATABASE_URL: scratch.settings.databaseUrl ?? '',
      DPC_ENCRYPTION_KEYS: Buffer.alloc(32, 9).toString('base64'),
      DPC_OUTBOUND_ALLOW: '127.0.0.0/8',
      DPC_JOB_LEASE_MS: '1000',
      DPC_RATE_LIMIT_MAX: '0',
    };
  });
  after(async () => {
    await target.close();
    await drop();
    rmSync(work, { recursive: true, force: true });
  });

  test('another server process resumes the migration and completes it', async () => {
    const account = JSON.parse(runDpc(['accounts', 'create', '--name', 'Killed'], env).stdout);
    const doomed = await spawnServe(env);
    let survivor: Awaited<ReturnType<typeof spawnServe>> | undefined;
    try {
      const tokenAnswer = await fetch(`${doomed.url}/oauth/dpc/token`, {
        method: 'POST',
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_id: account.clientId,
          client_secret: account.clientSecret,
        }),
      });
      const { access_token: token } = (await tokenAnswer.json()) as { access_token: string };
      const call = async (url: string, method: string, urlPath: string, body?: unknown) => {
        const response = await fetch(`${url}/dpc/v1${urlPath}`, {
          method,
          headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
          body: body ? JSON.stringify(body) : undefined,
        });
        return { status: response.status, body: (await response.json()) as any };
      };
      const project = await call(doomed.url, 'POST', '/projects', { name: 'killed' });
      const projectId = project.body.projectId as string;
      await git(
        ['push', '--quiet', `${doomed.url}/dpc/git/${projectId}.git`, 'refs/heads/*:refs/heads/*', 'refs/tags/*:refs/tags/*'],
        work,
        auth(token),
      );
      const targetToken = target.newToken();
      const connection = await call(doomed.url, 'POST', '/enterprise-oauth-connections', {
        name: 'target',
        provider: 'github',
        type: 'TOKEN',
        token: targetToken,
      });
      target.hold();
      const started = await call(doomed.url, 'POST', `/projects/${projectId}/repository-migration`, {
        mode: 'MIRROR_PUSH',
        targetCloneUrl: target.createRepository(`killed-${projectId}`),
        targetProvider: 'github',
        targetName: 'killed',
        targetEnterpriseOauthId: connection.body.id,
      });
      assert.equal(started.status, 202, JSON.stringify(started.body));
      await target.reached;
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      target.unhold();

      survivor = await spawnServe(env);
      const result = await settled(survivor.url, token, projectId, started.body.migrationId);
      assert.equal(result.status, 'COMPLETED', `${result.detail} ${survivor.logs()}`);
      assert.deepEqual(await refsOf(target.pathOf(`killed-${projectId}`)), await refsOf(work));
    } finally {
      if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
      if (survivor) {
        survivor.child.kill('SIGTERM');
        await survivor.exited;
      }
    }
  });
});

test('a migration to a loopback target fails when the deployment does not allow that range (git reaches no private address)', async () => {
  const target = await GitTarget.start();
  const server = await TestServer.start('sqlite'); // no DPC_OUTBOUND_ALLOW
  try {
    const caller = await server.newAccount();
    const projectId = await server.newProject(caller);
    const started = await server.api('POST', `/projects/${projectId}/repository-migration`, {
      token: caller.token,
      body: {
        mode: 'MIRROR_PUSH',
        targetCloneUrl: target.createRepository('private'),
        targetProvider: 'github',
        targetName: 'private',
      },
    });
    assert.equal(started.status, 202, started.text);
    const ended = await settled(server.url, caller.token, projectId, started.body.migrationId);
    assert.equal(ended.status, 'FAILED');
    assert.match(ended.detail ?? '', /127\.0\.0\.1 is a loopback, private or reserved address/);
    assert.deepEqual(await refsOf(target.pathOf('private')), []);
  } finally {
    await server.close();
    await target.close();
  }
});
