import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { serveGitHttpBackend } from '../../src/areas/repositories/http-backend.ts';

export function git(args: string[], cwd?: string): string {
  return execFileSync('git', args, {
    cwd,
    encoding: 'utf8',
    env: {
      ...process.env,
      GIT_TERMINAL_PROMPT: '0',
      GIT_AUTHOR_NAME: 't',
      GIT_AUTHOR_EMAIL: 't@t',
      GIT_COMMITTER_NAME: 't',
      GIT_COMMITTER_EMAIL: 't@t',
    },
    maxBuffer: 64 * 1024 * 1024,
  });
}

/** Every branch and tag of a repository (path or URL), as `ref oid` lines sorted. */
export function refsOf(repository: string): string[] {
  return git(['ls-remote', '--heads', '--tags', repository])
    .split('\n')
    .filter((line) => line && !line.endsWith('^{}'))
    .map((line) => line.split('\t').reverse().join(' '))
    .sort();
}

/** A working repository with `branches` (main first) and tags, each branch with a commit of its own. */
export function workingRepository(branches: string[], tags: string[]): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-work-'));
  git(['init', '--quiet', '--initial-branch=main', dir]);
  git(['commit', '--quiet', '--allow-empty', '-m', 'root'], dir);
  for (const branch of branches.filter((b) => b !== 'main')) {
    git(['checkout', '--quiet', '-b', branch, 'main'], dir);
    git(['commit', '--quiet', '--allow-empty', '-m', branch], dir);
  }
  git(['checkout', '--quiet', 'main'], dir);
  tags.forEach((tag, i) => git(i % 2 ? ['tag', tag] : ['tag', '-a', '-m', tag, tag], dir));
  return dir;
}

/**
 * A git host on 127.0.0.1: bare repositories served by `git http-backend` to requests whose Basic
 * password is a valid token (anything else is 401), and a GitLab stand-in of the token-rotation API
 * that issues a new token and revokes the one it was called with.
 */
export class GitTarget {
  readonly tokens = new Set<string>();
  readonly rotations: string[] = [];
  /** While set, git requests wait here (a slow target), to hold a migration IN_PROGRESS. */
  private held: Promise<void> | undefined;
  private release: (() => void) | undefined;

  private constructor(
    private readonly server: http.Server,
    readonly root: string,
    readonly url: string,
  ) {}

  static async start(): Promise<GitTarget> {
    const root = mkdtempSync(path.join(tmpdir(), 'dpc-git-target-'));
    let target!: GitTarget;
    const server = http.createServer((request, response) => void target.handle(request, response));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    target = new GitTarget(server, root, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    return target;
  }

  newToken(): string {
    const token = `glpat-${randomBytes(10).toString('hex')}`;
    this.tokens.add(token);
    return token;
  }

  /** A new bare repository; its clone URL. */
  createRepository(name: string): string {
    const dir = path.join(this.root, `${name}.git`);
    git(['init', '--quiet', '--bare', dir]);
    git(['config', 'http.receivepack', 'true'], dir);
    return `${this.url}/${name}.git`;
  }

  pathOf(name: string): string {
    return path.join(this.root, `${name}.git`);
  }

  hold(): void {
    this.held = new Promise((resolve) => (this.release = resolve));
  }

  unhold(): void {
    this.release?.();
    this.held = undefined;
  }

  private async handle(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
    const url = new URL(request.url ?? '/', this.url);
    if (request.method === 'POST' && url.pathname === '/api/v4/personal_access_tokens/self/rotate') {
      const old = String(request.headers['private-token'] ?? '');
      if (!this.tokens.delete(old)) return void response.writeHead(401).end('{"message":"401 Unauthorized"}');
      const token = this.newToken();
      this.rotations.push(old);
      return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: 1, token }));
    }
    const basic = /^Basic (.+)$/.exec(request.headers.authorization ?? '');
    const password = basic ? Buffer.from(basic[1], 'base64').toString().split(':').slice(1).join(':') : '';
    if (!this.tokens.has(password)) {
      return void response.writeHead(401, { 'www-authenticate': 'Basic realm="target"' }).end('no');
    }
    await this.held;
    await serveGitHttpBackend(request, response, { projectRoot: this.root, pathInfo: url.pathname, remoteUser: 'target' });
  }

  async close(): Promise<void> {
    this.unhold();
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
    rmSync(this.root, { recursive: true, force: true });
  }
}
