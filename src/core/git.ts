/**
 * The one way the server runs git. Every run has a deadline (the child is killed past it), network runs a
 * low-speed limit (git's http.lowSpeedLimit/lowSpeedTime, through GIT_HTTP_LOW_SPEED_*: a remote that
 * accepts the connection and never answers fails within `lowSpeedSeconds`), and git dies with the server:
 * on Linux it is started through util-linux `setpriv --pdeathsig KILL`, so the kernel kills it when the
 * server process ends, kill -9 included. (Its helpers, such as git-remote-https, are not told; a network
 * helper ends at its low-speed limit.) Where setpriv is missing (macOS) git runs directly and only the
 * deadline bounds it while the server lives. A run past its deadline is killed with its whole process group.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';

/** A git run that failed, ran out of time or stalled; the message names the command and git's complaint. */
export class GitError extends Error {
  constructor(
    /** The command's arguments (without `--git-dir`). */
    readonly args: string[],
    /** The exit code; null when git could not start or was killed. */
    readonly code: number | null,
    readonly stderr: string,
    message: string,
  ) {
    super(message);
  }
}

/** Bounds of the git runs that reach other hosts (repository migrations). */
export interface GitLimits {
  /** The longest one git command may run. */
  timeoutMs: number;
  /** Bytes per second below which an HTTP transfer counts as stalled... */
  lowSpeedLimit: number;
  /** ...for this many seconds, after which git gives up. */
  lowSpeedSeconds: number;
}

/** The deadline of local git plumbing (reads and commits on a bare repository of this server). */
export const LOCAL_GIT_TIMEOUT_MS = 60_000;

export interface GitRunOptions {
  cwd?: string;
  /** Runs on this repository (`git --git-dir`). */
  gitDir?: string;
  /** Extra environment, e.g. credentials as http.extraHeader (never in argv, which other users can read). */
  env?: Record<string, string>;
  /** Written to git's standard input (which is empty otherwise). */
  input?: Buffer | string;
  signal?: AbortSignal;
  /** The deadline; LOCAL_GIT_TIMEOUT_MS when not given. */
  timeoutMs?: number;
  /**
   * For runs that reach other hosts: the HTTP low-speed limit. Such runs also follow no HTTP redirect (git's
   * http.followRedirects=false): the host was checked against the outbound rules, the one redirected to was not.
   */
  lowSpeed?: { limit: number; seconds: number };
  /** Largest standard output kept; a run that writes more fails. 64 MiB when not given. */
  maxOutputBytes?: number;
}

/** The server's own environment, without GIT_* variables that would steer git to another repository or index. */
function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && !name.startsWith('GIT_')) env[name] = value;
  }
  return env;
}

let setprivAvailable: boolean | undefined;

/** Whether `setpriv --pdeathsig` works here (checked once). */
export function childrenDieWithServer(): boolean {
  setprivAvailable ??=
    process.platform === 'linux' && spawnSync('setpriv', ['--pdeathsig', 'KILL', '--', 'true'], { stdio: 'ignore' }).status === 0;
  return setprivAvailable;
}

/**
 * Spawns `git args` so that it dies with this process (see above). The caller handles the child; runGit is
 * what most code wants.
 */
export function spawnGit(args: string[], options: SpawnOptions): ChildProcess {
  if (childrenDieWithServer()) return spawn('setpriv', ['--pdeathsig', 'KILL', '--', 'git', ...args], options);
  return spawn('git', args, options);
}

/** Runs git; resolves its standard output, rejects with a GitError naming the command and why it failed. */
export function runGit(args: string[], options: GitRunOptions = {}): Promise<Buffer> {
  const timeoutMs = options.timeoutMs ?? LOCAL_GIT_TIMEOUT_MS;
  const maxOutput = options.maxOutputBytes ?? 64 * 1024 * 1024;
  const command = `git ${args[0]}`;
  return new Promise((resolve, reject) => {
    const env: Record<string, string> = { ...baseEnv(), GIT_TERMINAL_PROMPT: '0', LC_ALL: 'C' };
    if (options.lowSpeed) {
      env.GIT_HTTP_LOW_SPEED_LIMIT = String(options.lowSpeed.limit);
      env.GIT_HTTP_LOW_SPEED_TIME = String(options.lowSpeed.seconds);
    }
    Object.assign(env, options.env);
    const global = [
      ...(options.lowSpeed ? ['-c', 'http.followRedirects=false'] : []),
      ...(options.gitDir ? ['--git-dir', options.gitDir] : []),
    ];
    // Its own process group: git's helpers (git-remote-https, pack-objects) share its output pipes, so
    // stopping git alone would leave them running and the run unfinished; the whole group is killed.
    const child = spawnGit([...global, ...args], {
      cwd: options.cwd,
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    const out: Buffer[] = [];
    let size = 0;
    let err = '';
    let ended: 'timeout' | 'output' | 'aborted' | undefined;
    const kill = (why: typeof ended) => {
      ended ??= why;
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        child.kill('SIGKILL'); // already gone, or no group (it never started)
      }
    };
    const deadline = setTimeout(() => kill('timeout'), timeoutMs);
    const onAbort = () => kill('aborted');
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.signal?.aborted) onAbort();
    child.stdout!.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxOutput) kill('output');
      else out.push(chunk);
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      // Only the tail matters for the message; progress output can be long.
      err = (err + chunk.toString('utf8')).slice(-4000);
    });
    const settle = () => {
      clearTimeout(deadline);
      options.signal?.removeEventListener('abort', onAbort);
    };
    child.once('error', (error) => {
      settle();
      reject(new GitError(args, null, err, `${command} could not run: ${error.message}`));
    });
    child.once('close', (code) => {
      settle();
      if (code === 0 && !ended) return resolve(Buffer.concat(out));
      const complaint = err.trim().split('\n').slice(-3).join(' ').trim();
      const message =
        ended === 'timeout'
          ? `${command} did not finish within ${Math.round(timeoutMs / 1000)} s and was stopped`
          : ended === 'output'
            ? `${command} wrote more than ${maxOutput} bytes and was stopped`
            : ended === 'aborted'
              ? `${command} was stopped`
              : `${command} failed${complaint ? `: ${complaint}` : ` (exit ${code})`}`;
      reject(new GitError(args, ended ? null : code, err, message));
    });
    child.stdin!.on('error', () => {}); // git may exit before reading all its input; its exit code tells
    child.stdin!.end(options.input ?? '');
  });
}
