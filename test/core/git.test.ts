import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { childrenDieWithServer, GitError, runGit } from '../../src/core/git.ts';

/** A "git server" that accepts connections and never answers a byte (issue 36). */
async function silentServer(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/silent.git`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** Process ids whose parent is `pid` (Linux /proc). */
function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((name) => {
      try {
        // "pid (comm) state ppid ...": comm may hold spaces, so read after its closing parenthesis.
        const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid;
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Whether `pid` is a live process (not gone, not a zombie waiting to be reaped). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('git runs with a deadline, a low-speed limit, and die with the server', () => {
  let silent: Awaited<ReturnType<typeof silentServer>>;
  before(async () => {
    silent = await silentServer();
  });
  after(() => silent.close());

  test('a remote that accepts and never answers: the low-speed limit ends the run', async () => {
    const error = await runGit(['ls-remote', silent.url], { timeoutMs: 60_000, lowSpeed: { limit: 1000, seconds: 1 } }).then(
      () => assert.fail('ls-remote answered'),
      (failure: unknown) => failure,
    );
    assert.ok(error instanceof GitError);
    assert.match(error.message, /^git ls-remote failed: .*(too slow|Operation timed out)/i);
  });

  test('without a low-speed limit, the deadline ends the run', async () => {
    const error = await runGit(['ls-remote', silent.url], { timeoutMs: 1000 }).then(
      () => assert.fail('ls-remote answered'),
      (failure: unknown) => failure,
    );
    assert.ok(error instanceof GitError);
    assert.equal(error.message, 'git ls-remote did not finish within 1 s and was stopped');
  });

  test('a git child dies when the process that ran it is killed with SIGKILL', { skip: !childrenDieWithServer() }, async () => {
    const gitModule = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../src/core/git.ts');
    const script = `import { runGit } from ${JSON.stringify(gitModule)};
      runGit(['ls-remote', ${JSON.stringify(silent.url)}], { timeoutMs: 600000 }).catch(() => {});
      console.log('started');`;
    const parent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = new Promise((resolve) => parent.once('exit', resolve));
    await new Promise<void>((resolve) => parent.stdout!.on('data', (chunk) => String(chunk).includes('started') && resolve()));
    let git: number[] = [];
    for (let i = 0; i < 200 && git.length === 0; i += 1) {
      git = childrenOf(parent.pid!).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('git\0'));
      if (git.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(git.length, 1, 'the git child is running');
    parent.kill('SIGKILL');
    await exited;
    for (let i = 0; i < 200 && alive(git[0]); i += 1) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.ok(!alive(git[0]), `git (pid ${git[0]}) outlived the process that started it`);
    assert.ok(!existsSync(`/proc/${git[0]}/cmdline`) || !alive(git[0]));
  });
});
