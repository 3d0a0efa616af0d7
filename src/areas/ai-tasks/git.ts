import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { GitError, runGit } from '../../core/git.ts';

export { GitError };

/** Largest output read from one git command. */
const MAX_OUTPUT_BYTES = 32 * 1024 * 1024;

interface GitOptions {
  input?: Buffer | string;
  env?: Record<string, string>;
}

/**
 * Runs git on the bare repository `gitDir` (core/git.ts: a deadline, and the child dies with the server);
 * resolves with stdout, rejects with a GitError.
 */
function git(gitDir: string, args: string[], options: GitOptions = {}): Promise<Buffer> {
  return runGit(args, { gitDir, maxOutputBytes: MAX_OUTPUT_BYTES, ...options });
}

const text = async (output: Promise<Buffer>) => (await output).toString('utf8').trim();

/** Whether `name` is a valid branch name for git (check-ref-format). */
export async function isValidBranchName(gitDir: string, name: string): Promise<boolean> {
  if (name.startsWith('-')) return false;
  return git(gitDir, ['check-ref-format', `refs/heads/${name}`]).then(
    () => true,
    () => false,
  );
}

/** The commit branch `name` points at, or undefined when there is no such branch. */
export async function branchHead(gitDir: string, name: string): Promise<string | undefined> {
  try {
    return await text(git(gitDir, ['rev-parse', '--verify', '--quiet', `refs/heads/${name}^{commit}`]));
  } catch (error) {
    if (error instanceof GitError && error.code === 1) return undefined;
    throw error;
  }
}

/** Paths of the files under `folder` (relative to it) at `commit`; none when the folder is missing. */
export async function listFiles(gitDir: string, commit: string, folder: string): Promise<string[]> {
  const treeish = folder ? `${commit}:${folder}` : commit;
  try {
    const output = await git(gitDir, ['ls-tree', '-r', '-z', '--name-only', treeish]);
    return output.toString('utf8').split('\0').filter(Boolean);
  } catch (error) {
    if (error instanceof GitError && error.code === 128) return [];
    throw error;
  }
}

/** The content of file `filePath` at `commit`, or undefined when it is missing or not a file. */
export async function readFile(
  gitDir: string,
  commit: string,
  filePath: string,
): Promise<{ size: number; content: Buffer } | undefined> {
  const object = `${commit}:${filePath}`;
  try {
    if ((await text(git(gitDir, ['cat-file', '-t', object]))) !== 'blob') return undefined;
    const content = await git(gitDir, ['cat-file', 'blob', object]);
    return { size: content.length, content };
  } catch (error) {
    if (error instanceof GitError && error.code === 128) return undefined;
    throw error;
  }
}

export interface CommitRequest {
  /** The branch the commit goes on; created off `baseCommit` when it does not exist. */
  branch: string;
  baseCommit: string;
  files: { path: string; content: string }[];
  message: string;
  author: { name: string; email: string };
}

/**
 * Commits `files` on top of the branch (or of `baseCommit` for a new branch) without a work tree: blobs
 * by hash-object, a tree from a temporary index (GIT_INDEX_FILE), commit-tree, then update-ref with the
 * old value, so that a branch moved by someone else meanwhile is refused rather than overwritten.
 * Answers the new commit, or the current one when the files change nothing.
 */
export async function commitFiles(
  gitDir: string,
  request: CommitRequest,
): Promise<{ commit: string; created: boolean; changed: boolean }> {
  const current = await branchHead(gitDir, request.branch);
  const parent = current ?? request.baseCommit;
  const scratch = await mkdtemp(path.join(tmpdir(), 'dpc-index-'));
  try {
    const env = { GIT_INDEX_FILE: path.join(scratch, 'index') };
    await git(gitDir, ['read-tree', parent], { env });
    const entries: string[] = [];
    for (const file of request.files) {
      const blob = await text(git(gitDir, ['hash-object', '-w', '--stdin'], { input: file.content }));
      entries.push(`100644 ${blob}\t${file.path}\0`);
    }
    await git(gitDir, ['update-index', '-z', '--index-info'], { env, input: entries.join('') });
    const tree = await text(git(gitDir, ['write-tree'], { env }));
    if (current && tree === (await text(git(gitDir, ['rev-parse', `${parent}^{tree}`])))) {
      return { commit: parent, created: false, changed: false };
    }
    const identity = {
      GIT_AUTHOR_NAME: request.author.name,
      GIT_AUTHOR_EMAIL: request.author.email,
      GIT_COMMITTER_NAME: request.author.name,
      GIT_COMMITTER_EMAIL: request.author.email,
    };
    const commit = await text(
      git(gitDir, ['commit-tree', tree, '-p', parent, '-F', '-'], { input: request.message, env: identity }),
    );
    // An empty old value: the branch must not exist yet.
    await git(gitDir, [
      'update-ref',
      '-m',
      request.message.split('\n')[0],
      `refs/heads/${request.branch}`,
      commit,
      current ?? '',
    ]);
    return { commit, created: current === undefined, changed: true };
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
