import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { spawnGit } from '../../core/git.ts';

export interface BackendRequest {
  /** The folder the repository paths are relative to (GIT_PROJECT_ROOT). */
  projectRoot: string;
  /** The repository and service path below projectRoot, e.g. `/abc.git/info/refs`. */
  pathInfo: string;
  /** Who is pushing, as git records it in reflogs; its presence also enables receive-pack. */
  remoteUser: string;
  /** Git configuration for this request's git processes (receive-pack's checks), as `name: value`. */
  gitConfig?: Record<string, string>;
}

/**
 * What a push to a hosted repository must pass: every object is checked (receive.fsckObjects), trees with
 * `.git`, `..` or `.` entries (warnings to git fsck, which a checkout then trips over) are errors, and the
 * pack may be at most `maxPushBytes` (receive.maxInputSize). Refused pushes leave nothing behind: git
 * receives into a quarantine folder that it removes unless every check passes.
 */
export function receiveChecks(maxPushBytes: number): Record<string, string> {
  return {
    'receive.fsckObjects': 'true',
    'receive.fsck.hasDotgit': 'error',
    'receive.fsck.hasDotdot': 'error',
    'receive.fsck.hasDot': 'error',
    'receive.maxInputSize': String(maxPushBytes),
  };
}

const PASSED_HEADERS = ['content-type', 'content-encoding', 'git-protocol'];

/**
 * Answers one Git smart-HTTP request with `git http-backend` run as a CGI program: the request body
 * streams to its input (gzip bodies are inflated by git itself, told by HTTP_CONTENT_ENCODING) and its
 * output streams back once the CGI headers are read, so neither side is held in memory.
 */
export function serveGitHttpBackend(request: IncomingMessage, response: ServerResponse, target: BackendRequest): Promise<void> {
  const url = new URL(request.url ?? '/', 'http://git');
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    GIT_PROJECT_ROOT: target.projectRoot,
    GIT_HTTP_EXPORT_ALL: '1',
    PATH_INFO: target.pathInfo,
    REMOTE_USER: target.remoteUser,
    REMOTE_ADDR: request.socket.remoteAddress ?? '',
    REQUEST_METHOD: request.method ?? 'GET',
    QUERY_STRING: url.search.slice(1),
    GATEWAY_INTERFACE: 'CGI/1.1',
  };
  for (const name of PASSED_HEADERS) {
    const value = request.headers[name];
    if (typeof value === 'string')
      env[name === 'content-type' ? 'CONTENT_TYPE' : `HTTP_${name.toUpperCase().replace(/-/g, '_')}`] = value;
  }
  // Configuration through the environment (git 2.31+) reaches every git this request starts, whatever the
  // repository's own config says and however old the repository is.
  const config = Object.entries(target.gitConfig ?? {});
  config.forEach(([name, value], index) => {
    env[`GIT_CONFIG_KEY_${index}`] = name;
    env[`GIT_CONFIG_VALUE_${index}`] = value;
  });
  if (config.length > 0) env.GIT_CONFIG_COUNT = String(config.length);
  // Without CONTENT_LENGTH git reads the body to its end, which is what a chunked request needs.
  if (request.headers['content-length'] !== undefined) env.CONTENT_LENGTH = request.headers['content-length'];

  return new Promise((resolve) => {
    // Through core/git.ts: the child dies with the server, so a push cut off by a crash leaves no git behind.
    const child = spawnGit(['http-backend'], { env, stdio: ['pipe', 'pipe', 'pipe'] }) as ChildProcessWithoutNullStreams;
    let errors = '';
    child.stderr.on('data', (chunk: Buffer) => (errors = (errors + chunk.toString('utf8')).slice(-2000)));
    request.pipe(child.stdin);
    child.stdin.on('error', () => {}); // git may stop reading early (it refused the request); its answer says why.
    request.once('aborted', () => child.kill());
    response.once('close', () => {
      if (child.exitCode === null) child.kill();
    });

    let head = Buffer.alloc(0);
    let headersSent = false;
    child.stdout.on('data', (chunk: Buffer) => {
      if (headersSent) return void (response.write(chunk) || child.stdout.pause());
      head = Buffer.concat([head, chunk]);
      const end = headerEnd(head);
      if (!end) return;
      writeCgiHeaders(response, head.subarray(0, end.at).toString('latin1'));
      headersSent = true;
      const rest = head.subarray(end.at + end.length);
      if (rest.length) response.write(rest);
    });
    response.on('drain', () => child.stdout.resume());
    child.once('error', (error) => {
      errors = error.message;
    });
    child.once('close', (code) => {
      if (!headersSent && !response.headersSent) {
        response.statusCode = 500;
        response.setHeader('content-type', 'text/plain; charset=utf-8');
        response.end(`git http-backend failed (${code}): ${errors.trim()}\n`);
      } else {
        response.end();
      }
      resolve();
    });
  });
}

function headerEnd(buffer: Buffer): { at: number; length: number } | undefined {
  const crlf = buffer.indexOf('\r\n\r\n');
  const lf = buffer.indexOf('\n\n');
  if (crlf >= 0 && (lf < 0 || crlf < lf)) return { at: crlf, length: 4 };
  if (lf >= 0) return { at: lf, length: 2 };
  return undefined;
}

/** CGI response headers onto the HTTP response; `Status:` becomes the status line. */
function writeCgiHeaders(response: ServerResponse, block: string): void {
  let status = 200;
  for (const line of block.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim();
    const value = line.slice(colon + 1).trim();
    if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10) || 500;
    else response.setHeader(name, value);
  }
  response.writeHead(status);
}
