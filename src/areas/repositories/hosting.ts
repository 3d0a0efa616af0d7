import fs from 'node:fs/promises';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Config } from '../../core/config.ts';
import type { Executor } from '../../core/db/database.ts';
import { ProblemError } from '../../core/problems.ts';
import { runGit } from './git.ts';

type HostingConfig = Pick<Config, 'dataDir' | 'repositoriesDir'>;

/** The folder of every hosted repository: DPC_REPOSITORIES_DIR, else `repositories` in the data folder. */
export function repositoriesRoot(config: HostingConfig): string {
  return config.repositoriesDir ?? path.join(config.dataDir, 'repositories');
}

/** The bare repository the server hosts for a project (it may not exist yet: see ensureHostedRepository). */
export function hostedRepositoryPath(config: HostingConfig, projectId: string): string {
  return path.join(repositoriesRoot(config), `${projectId}.git`);
}

/** Removes the project's hosted repository, once the project is deleted (nothing when it has none). */
export async function removeHostedRepository(config: HostingConfig, projectId: string): Promise<void> {
  await fs.rm(hostedRepositoryPath(config, projectId), { recursive: true, force: true });
}

/**
 * The project's hosted bare repository, created on first use. It is made beside its final place and
 * renamed into it, so that two processes creating it at once both end with the same whole repository.
 */
export async function ensureHostedRepository(config: HostingConfig, projectId: string): Promise<string> {
  const repository = hostedRepositoryPath(config, projectId);
  if (await exists(path.join(repository, 'HEAD'))) return repository;
  const root = repositoriesRoot(config);
  await fs.mkdir(root, { recursive: true });
  const scratch = path.join(root, `.new-${randomUUID()}.git`);
  try {
    await runGit(['init', '--quiet', '--bare', '--initial-branch=main', scratch]);
    // Pushes over smart HTTP are allowed (the server checks who pushes); a push may not rewrite what
    // others fetched unless it is a mirror push of a migration, which does not go to the hosted copy.
    await runGit(['config', 'http.receivepack', 'true'], { cwd: scratch });
    await fs.rename(scratch, repository);
  } catch (error) {
    await fs.rm(scratch, { recursive: true, force: true });
    // Another process won the rename: its repository is as good as ours.
    if (!(await exists(path.join(repository, 'HEAD')))) throw error;
  }
  return repository;
}

/** Quarantines older than this are left by pushes that died with their server; no live push is this idle. */
export const STALE_QUARANTINE_MS = 24 * 60 * 60 * 1000;

/**
 * Removes what pushes cut off by a killed server left in the repository: git receives a push into a
 * quarantine folder (`objects/tmp_objdir-incoming-*`) and removes it when the push fails, unless git
 * itself is killed. Such a folder is not part of the repository (nothing in it is reachable), only
 * wasted space, which git's own gc would prune after two weeks; this removes it once it has not changed
 * for STALE_QUARANTINE_MS. Run before each push. Answers how many were removed.
 */
export async function sweepStaleQuarantines(repository: string, now = Date.now()): Promise<number> {
  const objects = path.join(repository, 'objects');
  let names: string[];
  try {
    names = await fs.readdir(objects);
  } catch {
    return 0; // not created yet
  }
  let removed = 0;
  for (const name of names.filter((candidate) => candidate.startsWith('tmp_objdir-incoming-'))) {
    const folder = path.join(objects, name);
    const changed = await latestChange(folder);
    if (changed !== undefined && now - changed > STALE_QUARANTINE_MS) {
      await fs.rm(folder, { recursive: true, force: true });
      removed += 1;
    }
  }
  return removed;
}

/** The latest modification time of a folder and what it holds (a live push writes into `pack/`). */
async function latestChange(folder: string): Promise<number | undefined> {
  try {
    let latest = (await fs.stat(folder)).mtimeMs;
    for (const entry of await fs.readdir(folder, { recursive: true })) {
      const stat = await fs.stat(path.join(folder, entry)).catch(() => undefined);
      if (stat && stat.mtimeMs > latest) latest = stat.mtimeMs;
    }
    return latest;
  } catch {
    return undefined; // removed meanwhile
  }
}

async function exists(file: string): Promise<boolean> {
  return fs.access(file).then(
    () => true,
    () => false,
  );
}

/**
 * Refuses (409) any Git operation on the project's repository while a migration of it is in progress:
 * pushes to the hosted repository, commits of AI agent tasks, artifact builds from the repository.
 */
export async function assertNoMigrationInProgress(db: Executor, projectId: string): Promise<void> {
  const running = await db
    .selectFrom('repositoryMigrations')
    .select('id')
    .where('projectId', '=', projectId)
    .where('status', '=', 'IN_PROGRESS')
    .executeTakeFirst();
  if (running) {
    throw new ProblemError(
      409,
      `The project's repository is being migrated (migration ${running.id}); Git operations on it are refused until the migration ends.`,
      { name: 'migration-in-progress' },
    );
  }
}
