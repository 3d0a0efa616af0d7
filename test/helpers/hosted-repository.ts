import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Config } from '../../src/core/config.ts';
import { ensureHostedRepository, hostedRepositoryPath } from '../../src/areas/repositories/hosting.ts';

/** Gives the project's hosted repository a branch `main` holding `files`; the repository's git directory. */
export async function seedRepository(config: Config, projectId: string, files: Record<string, string>): Promise<string> {
  await ensureHostedRepository(config, projectId);
  const gitDir = hostedRepositoryPath(config, projectId);
  const work = mkdtempSync(path.join(tmpdir(), 'dpc-seed-'));
  try {
    const run = (...args: string[]) =>
      execFileSync('git', args, {
        cwd: work,
        env: {
          ...process.env,
          GIT_AUTHOR_NAME: 't',
          GIT_AUTHOR_EMAIL: 't@t',
          GIT_COMMITTER_NAME: 't',
          GIT_COMMITTER_EMAIL: 't@t',
        },
      });
    run('init', '--quiet', '--initial-branch=main');
    for (const [name, content] of Object.entries(files)) {
      mkdirSync(path.dirname(path.join(work, name)), { recursive: true });
      writeFileSync(path.join(work, name), content);
    }
    run('add', '.');
    run('commit', '--quiet', '-m', 'seed');
    run('push', '--quiet', gitDir, 'main');
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return gitDir;
}
