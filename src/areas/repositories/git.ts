import { spawn } from 'node:child_process';

/** A git command that failed; its message carries git's own last lines of error output. */
export class GitError extends Error {}

export interface GitOptions {
  cwd?: string;
  /** Extra environment, e.g. credentials as http.extraHeader (never in argv, which other users can read). */
  env?: Record<string, string>;
  signal?: AbortSignal;
}

/** Runs `git args`; resolves its standard output, rejects with a GitError naming the command and git's complaint. */
export function runGit(args: string[], options: GitOptions = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, {
      cwd: options.cwd,
      env: { ...process.env, GIT_TERMINAL_PROMPT: '0', LC_ALL: 'C', ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
      signal: options.signal,
    });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => {
      // Only the tail matters for the message; progress output can be long.
      err = (err + chunk.toString('utf8')).slice(-4000);
    });
    child.once('error', (error) => reject(new GitError(`git ${args[0]} could not run: ${error.message}`)));
    child.once('close', (code) => {
      if (code === 0) return resolve(Buffer.concat(out).toString('utf8'));
      const complaint = err.trim().split('\n').slice(-3).join(' ').trim();
      reject(new GitError(`git ${args[0]} failed${complaint ? `: ${complaint}` : ` (exit ${code})`}`));
    });
  });
}

/** Environment that makes git send `Authorization: Basic user:password` on its HTTP requests. */
export function basicAuthEnv(user: string, password: string): Record<string, string> {
  const value = Buffer.from(`${user}:${password}`).toString('base64');
  return { GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: 'http.extraHeader', GIT_CONFIG_VALUE_0: `Authorization: Basic ${value}` };
}

/** Branches and tags of a repository (a path or URL): ref name to object id; peeled tag lines are left out. */
export async function listRefs(repository: string, options: GitOptions = {}): Promise<Map<string, string>> {
  const output = await runGit(['ls-remote', '--heads', '--tags', repository], options);
  const refs = new Map<string, string>();
  for (const line of output.split('\n')) {
    const [oid, ref] = line.split('\t');
    if (ref && !ref.endsWith('^{}')) refs.set(ref, oid);
  }
  return refs;
}
