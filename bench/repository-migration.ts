import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { basicAuthEnv } from '../src/areas/repositories/git.ts';
import { git, GitTarget, refsOf } from '../test/helpers/git-target.ts';
import { record, startBenchServer } from './lib.ts';

const BRANCHES = 1000;
const TAGS = 1000;

/** A repository with BRANCHES branches, each on a commit of its own, and TAGS tags, made by one fast-import. */
function largeRepository(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-repo-'));
  execFileSync('git', ['init', '--quiet', '--bare', dir]);
  const lines: string[] = [];
  for (let i = 1; i <= BRANCHES; i += 1) {
    const message = `commit ${i}\n`;
    lines.push(`commit refs/heads/branch-${i}`, `mark :${i}`, `committer bench <b@b> ${1_700_000_000 + i} +0000`);
    lines.push(`data ${Buffer.byteLength(message)}`, message.trimEnd());
    if (i > 1) lines.push(`from :${i - 1}`);
    lines.push(`M 644 inline file-${i}.txt`, `data ${String(i).length}`, String(i), '');
  }
  for (let i = 1; i <= TAGS; i += 1) lines.push(`reset refs/tags/tag-${i}`, `from :${((i - 1) % BRANCHES) + 1}`, '');
  execFileSync('git', ['fast-import', '--quiet'], { cwd: dir, input: lines.join('\n') + '\n' });
  return dir;
}

/** `npm run bench repository-migration`: an E28 MIRROR_PUSH against a bare `git push --mirror` of the same repository. */
export async function bench(): Promise<void> {
  const target = await GitTarget.start();
  const server = await startBenchServer({ env: { DPC_OUTBOUND_ALLOW: '127.0.0.0/8' } });
  const source = largeRepository();
  try {
    const { projectId } = await server.api('POST', '/projects', { name: 'bench repository' });
    await git(['push', '--quiet', '--mirror', `${server.url}/dpc/git/${projectId}.git`], source, basicAuthEnv('x', server.token));
    const token = target.newToken();
    const connection = await server.api('POST', '/enterprise-oauth-connections', {
      name: 'bench target',
      provider: 'github',
      type: 'TOKEN',
      token,
    });
    const hosted = path.join(server.dataDir, 'repositories', `${projectId}.git`);

    // Baseline: what the migration does at its core, by hand, from the same hosted repository to the same target server.
    const bareUrl = target.createRepository('bare');
    let started = performance.now();
    await git(['push', '--quiet', '--mirror', bareUrl], hosted, basicAuthEnv('x', token));
    const bareMs = performance.now() - started;

    const migrationUrl = target.createRepository('migrated');
    started = performance.now();
    const { migrationId } = await server.api('POST', `/projects/${projectId}/repository-migration`, {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: migrationUrl,
      targetProvider: 'github',
      targetName: 'migrated',
      targetEnterpriseOauthId: connection.id,
    });
    let status: { status: string; detail?: string };
    do {
      await new Promise((resolve) => setTimeout(resolve, 20));
      status = await server.api('GET', `/projects/${projectId}/repository-migration/${migrationId}`);
    } while (status.status === 'IN_PROGRESS');
    const migrationMs = performance.now() - started;
    if (status.status !== 'COMPLETED') throw new Error(`migration ${status.status}: ${status.detail}`);
    const refs = await refsOf(target.pathOf('migrated'));
    if (refs.length !== BRANCHES + TAGS) throw new Error(`the target holds ${refs.length} refs`);

    console.log(`bare git push --mirror: ${bareMs.toFixed(0)} ms; E28 MIRROR_PUSH to COMPLETED: ${migrationMs.toFixed(0)} ms`);
    record({
      name: `E28 MIRROR_PUSH of ${BRANCHES} branches and ${TAGS} tags: time against a bare git push --mirror`,
      measured: migrationMs / bareMs,
      atMost: 1.3,
    });
  } finally {
    await server.stop();
    await target.close();
    rmSync(source, { recursive: true, force: true });
  }
}
