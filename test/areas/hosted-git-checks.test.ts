import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { basicAuthEnv } from '../../src/areas/repositories/git.ts';
import { hostedRepositoryPath } from '../../src/areas/repositories/hosting.ts';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { git, refsOf } from '../helpers/git-target.ts';

/**
 * What a push to a hosted repository must pass (issue 36): every object is checked, trees with `.git`,
 * `..` or `.` entries are refused, and the pack is at most DPC_GIT_MAX_PUSH_BYTES. A refused push leaves
 * the repository as it was, and the next good push works.
 */
const MAX_PUSH_BYTES = 256 * 1024;

function local(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, {
    cwd,
    encoding: 'utf8',
    input: '',
    env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
  }).trim();
}

function mktree(cwd: string, entries: string[]): string {
  return execFileSync('git', ['mktree'], { cwd, encoding: 'utf8', input: `${entries.join('\n')}\n` }).trim();
}

describeEachStore('hosted repositories check what is pushed', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let work: string;
  before(async () => {
    server = await TestServer.start(kind, { gitMaxPushBytes: MAX_PUSH_BYTES });
    caller = await server.newAccount();
    work = mkdtempSync(path.join(tmpdir(), 'dpc-push-'));
    local(work, 'init', '--quiet', '--initial-branch=main');
    writeFileSync(path.join(work, 'README.md'), 'hello\n');
    local(work, 'add', '.');
    local(work, 'commit', '--quiet', '-m', 'root');
  });
  after(async () => {
    await server.close();
    rmSync(work, { recursive: true, force: true });
  });

  const hostedUrl = (projectId: string) => `${server.url}/dpc/git/${projectId}.git`;
  const push = (projectId: string, ...refspecs: string[]) =>
    git(['push', '--quiet', hostedUrl(projectId), ...refspecs], work, basicAuthEnv('git', caller.token));

  /** A commit on main whose tree holds `entries` (mktree lines), as no working tree could. */
  function craftedCommit(entries: string[]): string {
    const tree = mktree(work, entries);
    return local(work, 'commit-tree', tree, '-p', 'main', '-m', 'crafted');
  }

  test('trees with .git, .. or . entries, at the top or nested, are refused; nothing is stored', async () => {
    const projectId = await server.newProject(caller);
    await push(projectId, 'main');
    const repository = hostedRepositoryPath(server.config, projectId);
    const before = await refsOf(repository);
    const blob = execFileSync('git', ['hash-object', '-w', '--stdin'], { cwd: work, input: 'x\n', encoding: 'utf8' }).trim();
    const dotGit = mktree(work, [`100644 blob ${blob}\tconfig`]);
    const cases = {
      '.git': [`040000 tree ${dotGit}\t.git`],
      '.GIT': [`100644 blob ${blob}\t.GIT`],
      '..': [`100644 blob ${blob}\t..`],
      '.': [`100644 blob ${blob}\t.`],
      'nested .git': [`040000 tree ${mktree(work, [`040000 tree ${dotGit}\t.git`])}\tpipelines`],
    };
    for (const [name, entries] of Object.entries(cases)) {
      const commit = craftedCommit(entries);
      await assert.rejects(push(projectId, `${commit}:refs/heads/evil`), /hasDot|fsck|rejected|unpack/i, name);
    }
    assert.deepEqual(await refsOf(repository), before);
    // Nothing of the refused pushes stayed in the repository (git received them into a quarantine).
    for (const name of Object.keys(cases)) {
      const tree = mktree(work, cases[name as keyof typeof cases]);
      assert.throws(() => execFileSync('git', ['--git-dir', repository, 'cat-file', '-e', tree], { stdio: 'ignore' }), name);
    }
    // The repository is whole, and a good push works.
    execFileSync('git', ['--git-dir', repository, 'fsck', '--no-dangling'], { stdio: 'pipe' });
    writeFileSync(path.join(work, 'next.txt'), 'next\n');
    local(work, 'add', '.');
    local(work, 'commit', '--quiet', '-m', 'next');
    await push(projectId, 'main');
    assert.equal(local(work, 'ls-remote', repository, 'refs/heads/main').split('\t')[0], local(work, 'rev-parse', 'main'));
  });

  test('a push larger than DPC_GIT_MAX_PUSH_BYTES is refused and leaves nothing behind; a smaller one works', async () => {
    const projectId = await server.newProject(caller);
    await push(projectId, 'main');
    const repository = hostedRepositoryPath(server.config, projectId);
    const before = await refsOf(repository);
    local(work, 'checkout', '--quiet', '-b', 'big');
    // Random bytes do not compress: the pack is larger than the limit.
    writeFileSync(path.join(work, 'big.bin'), randomBytes(MAX_PUSH_BYTES + 1536 * 1024));
    local(work, 'add', '.');
    local(work, 'commit', '--quiet', '-m', 'big');
    // Sent in chunks, without a length (git's way past http.postBuffer), git itself stops at receive.maxInputSize...
    await assert.rejects(push(projectId, 'big'), /maximum allowed size/i);
    // ...and with its length given, the request is refused before it is read (413).
    await assert.rejects(
      git(
        ['-c', 'http.postBuffer=16777216', 'push', '--quiet', hostedUrl(projectId), 'big'],
        work,
        basicAuthEnv('git', caller.token),
      ),
      /413/,
    );
    assert.deepEqual(await refsOf(repository), before);
    assert.deepEqual(
      readdirSync(path.join(repository, 'objects')).filter(
        (name) => name.startsWith('tmp_objdir') || name.startsWith('incoming'),
      ),
      [],
    );
    local(work, 'checkout', '--quiet', 'main');
    writeFileSync(path.join(work, 'small.bin'), randomBytes(MAX_PUSH_BYTES / 4));
    local(work, 'add', '.');
    local(work, 'commit', '--quiet', '-m', 'small');
    await push(projectId, 'main');
    assert.equal(local(work, 'ls-remote', repository, 'refs/heads/main').split('\t')[0], local(work, 'rev-parse', 'main'));
  });
});
