import { GitError, runGit as runCoreGit, type GitLimits } from '../../core/git.ts';

export { GitError };

export interface GitOptions {
  cwd?: string;
  /** Extra environment, e.g. credentials as http.extraHeader (never in argv, which other users can read). */
  env?: Record<string, string>;
  signal?: AbortSignal;
  /** For runs that reach another host: their deadline and low-speed limit (local runs have core/git.ts's deadline). */
  limits?: GitLimits;
}

/** Runs `git args` (core/git.ts); resolves its standard output, rejects with a GitError naming the command and git's complaint. */
export async function runGit(args: string[], options: GitOptions = {}): Promise<string> {
  const { limits, ...rest } = options;
  const output = await runCoreGit(args, {
    ...rest,
    ...(limits && {
      timeoutMs: limits.timeoutMs,
      lowSpeed: { limit: limits.lowSpeedLimit, seconds: limits.lowSpeedSeconds },
    }),
  });
  return output.toString('utf8');
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
