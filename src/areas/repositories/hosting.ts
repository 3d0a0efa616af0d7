import { execFile } from 'node:child_process';
import { access, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Config } from '../../core/config.ts';
import type { Executor } from '../../core/db/database.ts';

/**
 * Where a project's hosted Git repository lives: a bare repository in the data folder. (Stand-in for the
 * repos area's module of the same name and signatures, issue 13; that branch's version supersedes it.)
 */
export function hostedRepositoryPath(config: Pick<Config, 'dataDir'>, projectId: string): string {
  return path.join(config.dataDir, 'repositories', `${projectId}.git`);
}

/** The project's hosted repository, created (bare, empty) on first use. */
export async function ensureHostedRepository(config: Pick<Config, 'dataDir'>, projectId: string): Promise<string> {
  const gitDir = hostedRepositoryPath(config, projectId);
  try {
    await access(path.join(gitDir, 'HEAD'));
  } catch {
    await mkdir(path.dirname(gitDir), { recursive: true });
    await promisify(execFile)('git', ['init', '--bare', '--quiet', '--initial-branch=main', gitDir]);
  }
  return gitDir;
}

/**
 * Throws the 409 problem while a migration of the project's repository is in progress. Repository
 * migrations (issue 13) do not exist on this branch yet, so none can be in progress.
 */
export async function assertNoMigrationInProgress(_executor: Executor, _projectId: string): Promise<void> {}
