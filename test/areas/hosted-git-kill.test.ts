import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { basicAuthEnv } from '../../src/areas/repositories/git.ts';
import { STALE_QUARANTINE_MS } from '../../src/areas/repositories/hosting.ts';
import { describeEachStore, scratchStore } from '../helpers/harness.ts';
import { git, refsOf } from '../helpers/git-target.ts';
import { runDpc, spawnServe } from '../helpers/processes.ts';

/**
 * A TCP relay to the server that forwards what clients send until `holdAfter` bytes went through, then
 * holds the rest: a push it carries stops midway, deterministically, for as long as the test likes.
 */
async function holdingRelay(port: number, holdAfter: number) {
  let forwarded = 0;
  let reached!: () => void;
  const held = new Promise<void>((resolve) => (reached = resolve));
  const sockets = new Set<net.Socket>();
  const relay = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    sockets.add(client).add(upstream);
    upstream.pipe(client);
    client.on('data', (chunk: Buffer) => {
      if (forwarded >= holdAfter) return;
      forwarded += chunk.length;
      upstream.write(chunk);
      if (forwarded >= holdAfter) {
        client.pause();
        reached();
      }
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(relay.address() as AddressInfo).port}`,
    held,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        relay.close(() => resolve());
      }),
  };
}

function local(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' },
  }).trim();
}

const quarantines = (repository: string) =>
  readdirSync(path.join(repository, 'objects')).filter((name) => name.startsWith('tmp_objdir') || name.startsWith('incoming'));

async function eventually(done: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 600; i += 1) {
    if (done()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describeEachStore('a push cut off by kill -9 of the server (issue 36)', (kind) => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  let repositories: string;
  let work: string;
  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    repositories = mkdtempSync(path.join(tmpdir(), 'dpc-repositories-'));
    env = {
      DPC_DATA_DIR: scratch.settings.dataDir ?? '',
      DATABASE_URL: scratch.settings.databaseUrl ?? '',
      DPC_REPOSITORIES_DIR: repositories,
      DPC_ENCRYPTION_KEYS: Buffer.alloc(32, 7).toString('base64'),
      DPC_RATE_LIMIT_MAX: '0',
    };
    work = mkdtempSync(path.join(tmpdir(), 'dpc-push-'));
    local(work, 'init', '--quiet', '--initial-branch=main');
    writeFileSync(path.join(work, 'README.md'), 'hello\n');
    local(work, 'add', '.');
    local(work, 'commit', '--quiet', '-m', 'root');
  });
  after(async () => {
    await drop();
    rmSync(repositories, { recursive: true, force: true });
    rmSync(work, { recursive: true, force: true });
  });

  test('leaves the repository as it was and whole; the next push works and clears what the cut one left', async () => {
    const account = JSON.parse(runDpc(['accounts', 'create', '--name', 'Pushed'], env).stdout);
    const doomed = await spawnServe(env);
    let survivor: Awaited<ReturnType<typeof spawnServe>> | undefined;
    let relay: Awaited<ReturnType<typeof holdingRelay>> | undefined;
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
      const project = await fetch(`${doomed.url}/dpc/v1/projects`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'pushed' }),
      });
      const { projectId } = (await project.json()) as { projectId: string };
      const auth = basicAuthEnv('git', token);
      const repositoryPath = `/dpc/git/${projectId}.git`;
      await git(['push', '--quiet', `${doomed.url}${repositoryPath}`, 'main'], work, auth);
      const repository = path.join(repositories, `${projectId}.git`);
      const before = await refsOf(repository);

      // A push of 4 MiB that does not compress, through a relay that stops it after 1 MiB.
      local(work, 'checkout', '--quiet', '-b', 'big');
      writeFileSync(path.join(work, 'big.bin'), randomBytes(4 * 1024 * 1024));
      local(work, 'add', '.');
      local(work, 'commit', '--quiet', '-m', 'big');
      relay = await holdingRelay(Number(new URL(doomed.url).port), 1024 * 1024);
      const cutOff = git(['push', '--quiet', `${relay.url}${repositoryPath}`, 'big'], work, auth).then(
        () => 'pushed',
        (error: Error) => error.message,
      );
      await relay.held;
      // git is receiving it: its quarantine folder is there.
      await eventually(() => quarantines(repository).length > 0, 'the push to reach git');
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      await relay.close();
      assert.notEqual(await cutOff, 'pushed');

      // Nothing half-written: the refs are as they were, every object is whole, and nothing of the cut push is
      // in the repository (git received it into a quarantine folder, which a killed git may leave behind).
      assert.deepEqual(await refsOf(repository), before);
      execFileSync('git', ['--git-dir', repository, 'fsck', '--full', '--no-dangling'], { stdio: 'pipe' });
      const big = local(work, 'rev-parse', 'big');
      assert.throws(() => execFileSync('git', ['--git-dir', repository, 'cat-file', '-e', big], { stdio: 'ignore' }));
      // A quarantine left that long ago is removed by the next push.
      const longAgo = new Date(Date.now() - 2 * STALE_QUARANTINE_MS);
      for (const name of quarantines(repository)) {
        const folder = path.join(repository, 'objects', name);
        for (const entry of readdirSync(folder, { recursive: true }) as string[])
          utimesSync(path.join(folder, entry), longAgo, longAgo);
        utimesSync(folder, longAgo, longAgo);
      }

      survivor = await spawnServe(env);
      await git(['push', '--quiet', `${survivor.url}${repositoryPath}`, 'big'], work, auth);
      assert.equal(
        (await refsOf(repository)).find((line) => line.startsWith('refs/heads/big ')),
        `refs/heads/big ${local(work, 'rev-parse', 'big')}`,
      );
      execFileSync('git', ['--git-dir', repository, 'fsck', '--full', '--no-dangling'], { stdio: 'pipe' });
      assert.deepEqual(quarantines(repository), []);
    } finally {
      await relay?.close();
      if (doomed.child.exitCode === null) doomed.child.kill('SIGKILL');
      if (survivor) {
        survivor.child.kill('SIGTERM');
        await survivor.exited;
      }
    }
  });
});
