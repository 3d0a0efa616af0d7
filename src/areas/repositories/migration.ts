import { emit } from '../../core/outbox.ts';
import { accountOfProject } from '../projects/index.ts';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, ProblemError } from '../../core/problems.ts';
import { assertNoMigrationInProgress, ensureHostedRepository } from './hosting.ts';
import { basicAuthEnv, GitError, listRefs, runGit } from './git.ts';
import type { GitLimits } from '../../core/git.ts';
import { GitLabTokenRotation, REQUIRED_PROVIDER_PARAMETERS, RotationError, TOKEN_USER, type TokenRotation } from './providers.ts';
import { checkCloneUrl, requireCredentialFor, sealContext } from './service.ts';
import {
  externalRepositoryOf,
  findGitCredential,
  findMigration,
  finishMigration,
  insertMigration,
  updateMigration,
  upsertExternalRepository,
  type MigrationRow,
} from './repository.ts';
import type { GitProvider, StartMigrationRequest } from './schemas.ts';
import { OutboundClient, OutboundError, outboundSettings } from '../../core/outbound.ts';
import { credentialViolations, refuseCredentials } from '../../core/credentials.ts';

export const MIGRATION_JOB = 'repository-migration';
/** Runs of one migration (each server kill costs one) before it is failed rather than resumed again. */
const MAX_RUNS = 3;

/** Where a migration failed, in words fit for its detail. */
class MigrationFailure extends Error {}

/** A clone URL reduced to what names the repository: scheme, lower-case host, non-default port, path without `.git` or `/`. */
export function normalisedCloneUrl(url: string): string {
  const parsed = new URL(url);
  const pathname = decodeURIComponent(parsed.pathname)
    .replace(/\/+$/, '')
    .replace(/\.git$/, '');
  return `${parsed.protocol}//${parsed.host.toLowerCase()}${pathname}`;
}

function conflictInProgress(projectId: string): ProblemError {
  return new ProblemError(409, `A repository migration is already in progress for project ${projectId}; one runs at a time.`, {
    name: 'migration-in-progress',
  });
}

/**
 * E28: checks every rule, then records the migration IN_PROGRESS and its job in one transaction.
 * The store's unique index on in-progress migrations makes exactly one of two simultaneous starts win.
 */
export async function startMigration(
  app: FastifyInstance,
  trx: Executor,
  accountId: string,
  projectId: string,
  request: StartMigrationRequest,
  accessToken: string | undefined,
): Promise<string> {
  const target = checkCloneUrl(request.targetCloneUrl, 'targetCloneUrl');
  const provider = request.targetProvider;
  const parameters = request.providerParameters ?? {};
  const required = REQUIRED_PROVIDER_PARAMETERS[provider];
  const missing = required.filter((key) => !parameters[key]);
  const unknown = Object.keys(parameters).filter((key) => !required.includes(key));
  if (missing.length || unknown.length) {
    throw badRequest(`providerParameters for a ${provider} target take ${required.length ? required.join(', ') : 'no keys'}.`, [
      ...missing.map((key) => `body.providerParameters.${key}: required for ${provider}`),
      ...unknown.map((key) => `body.providerParameters.${key}: not a parameter of ${provider}`),
    ]);
  }
  refuseCredentials(
    credentialViolations(parameters, 'body.providerParameters', 'give tokens in Git-Provider-Access-Token or a connection'),
    'providerParameters carry a credential.',
  );
  if (provider === 'gitlab' && !accessToken) {
    throw badRequest('A gitlab target needs the Git-Provider-Access-Token header (a fresh token: it is rotated and revoked).', [
      'headers.git-provider-access-token: required for a gitlab target',
    ]);
  }
  const current = await externalRepositoryOf(trx, projectId);
  const currentUrl = current?.cloneUrl;
  const same = currentUrl
    ? normalisedCloneUrl(currentUrl) === normalisedCloneUrl(target.href)
    : normalisedCloneUrl(target.href).endsWith(`/dpc/git/${projectId}`);
  if (same) {
    throw badRequest("The target repository is the project's current repository.", [
      'body.targetCloneUrl: must differ from the current repository',
    ]);
  }
  if (request.targetEnterpriseOauthId) {
    await requireCredentialFor(trx, accountId, request.targetEnterpriseOauthId, provider, 'targetEnterpriseOauthId');
  }
  await assertNoMigrationInProgress(trx, projectId).catch(() => {
    throw conflictInProgress(projectId);
  });
  const id = randomUUID();
  try {
    await insertMigration(trx, {
      id,
      projectId,
      mode: request.mode,
      targetCloneUrl: request.targetCloneUrl,
      targetProvider: provider,
      targetName: request.targetName,
      gitCredentialId: request.targetEnterpriseOauthId ?? null,
      providerParameters: JSON.stringify(parameters),
      sealedToken: accessToken ? app.secretBox.seal(accessToken, sealContext.migration(id)) : null,
      tokenRotated: 0,
      phase: 'QUEUED',
      status: 'IN_PROGRESS',
      detail: null,
      createdAt: now(),
      finishedAt: null,
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw conflictInProgress(projectId);
    throw error;
  }
  await app.jobs.enqueue(trx, MIGRATION_JOB, { migrationId: id }, { maxAttempts: MAX_RUNS });
  return id;
}

/** A repository git can reach: a path or URL, and the environment carrying its credentials. */
interface GitEndpoint {
  location: string;
  env: Record<string, string>;
}

/**
 * Runs one git step of a migration; a git failure (a stall or the deadline too) fails the migration with a
 * detail that names the step.
 */
async function gitStep<T>(step: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof GitError) throw new MigrationFailure(`${step} failed: ${error.message}`);
    throw error;
  }
}

/** The background half of a migration: a durable job, resumed by another process if this one dies. */
export class MigrationRunner {
  /** Git reaches clone URLs itself; their hosts are checked against the outbound rules first. */
  private readonly outbound: OutboundClient;

  constructor(
    private readonly app: FastifyInstance,
    private readonly rotation: TokenRotation = new GitLabTokenRotation(app.config),
  ) {
    this.outbound = new OutboundClient(outboundSettings(app.config));
  }

  /** Refuses a clone URL on a loopback, private or reserved address the deployment does not allow. */
  private async reachable(cloneUrl: string): Promise<string> {
    try {
      await this.outbound.checkHost(new URL(cloneUrl));
    } catch (error) {
      if (error instanceof OutboundError || (error as NodeJS.ErrnoException).code === 'ENOTFOUND') {
        throw new MigrationFailure(`${cloneUrl} cannot be reached: ${(error as Error).message}`);
      }
      throw error;
    }
    return cloneUrl;
  }

  register(): void {
    this.app.jobs.register(MIGRATION_JOB, (payload, job) =>
      this.run((payload as { migrationId: string }).migrationId, job.attempts),
    );
  }

  private get db() {
    return this.app.store.db;
  }

  /** Every git run of a migration reaches another host: a deadline and a low-speed limit (core/git.ts). */
  private get limits(): GitLimits {
    const { gitTimeoutMs, gitLowSpeedLimit, gitLowSpeedSeconds } = this.app.config;
    return { timeoutMs: gitTimeoutMs, lowSpeedLimit: gitLowSpeedLimit, lowSpeedSeconds: gitLowSpeedSeconds };
  }

  async run(migrationId: string, runs: number): Promise<void> {
    const migration = await findMigration(this.db, migrationId);
    if (!migration || migration.status !== 'IN_PROGRESS') return;
    try {
      if (runs > MAX_RUNS)
        throw new MigrationFailure(`the migration was interrupted ${runs - 1} times (server restarts); it was stopped`);
      const target = await this.targetEndpoint(migration);
      const source = await this.sourceEndpoint(migration.projectId);
      if (migration.mode === 'MIRROR_PUSH') await this.mirrorPush(migration, source, target);
      else await this.checkBranches(source, target);
      await this.complete(migration);
    } catch (error) {
      const expected = error instanceof MigrationFailure || error instanceof GitError || error instanceof RotationError;
      // A failure of the store itself is retried by the job queue, unless this was the last run.
      if (!expected && runs < MAX_RUNS) throw error;
      const message = error instanceof Error ? error.message : String(error);
      this.app.log.warn({ migrationId, err: error }, 'repository migration failed');
      await this.finish(migrationId, 'FAILED', expected ? message : `unexpected error: ${message}`);
    }
  }

  /** The target and its credentials; a gitlab token is rotated first, and only the rotated one is kept. */
  private async targetEndpoint(migration: MigrationRow): Promise<GitEndpoint> {
    const location = await this.reachable(migration.targetCloneUrl);
    const provider = migration.targetProvider as GitProvider;
    let token = migration.sealedToken
      ? this.app.secretBox.open(migration.sealedToken, sealContext.migration(migration.id))
      : undefined;
    if (provider === 'gitlab' && token && !migration.tokenRotated) {
      token = await this.rotation.rotate(token, {
        cloneUrl: migration.targetCloneUrl,
        parameters: JSON.parse(migration.providerParameters) as Record<string, string>,
      });
      await updateMigration(this.db, migration.id, {
        sealedToken: this.app.secretBox.seal(token, sealContext.migration(migration.id)),
        tokenRotated: 1,
      });
      migration.tokenRotated = 1;
    }
    if (!token && migration.gitCredentialId) token = await this.credentialToken(migration.gitCredentialId);
    return { location, env: token ? basicAuthEnv(TOKEN_USER[provider], token) : {} };
  }

  private async credentialToken(credentialId: string): Promise<string> {
    const credential = await findGitCredential(this.db, credentialId);
    if (!credential) throw new MigrationFailure(`enterprise OAuth connection ${credentialId} no longer exists`);
    if (credential.credentialType !== 'TOKEN') {
      throw new MigrationFailure(
        `enterprise OAuth connection ${credentialId} holds APP credentials; Git access with them is not supported, use a TOKEN connection`,
      );
    }
    return this.app.secretBox.open(credential.sealedSecret, sealContext.credential(credentialId));
  }

  /** The project's repository: the hosted bare repository, or its external one with its credentials. */
  private async sourceEndpoint(projectId: string): Promise<GitEndpoint> {
    const external = await externalRepositoryOf(this.db, projectId);
    if (!external) return { location: await ensureHostedRepository(this.app.config, projectId), env: {} };
    const token = external.sealedToken
      ? this.app.secretBox.open(external.sealedToken, sealContext.projectRepository(projectId))
      : external.gitCredentialId
        ? await this.credentialToken(external.gitCredentialId)
        : undefined;
    const location = await this.reachable(external.cloneUrl);
    return { location, env: token ? basicAuthEnv(TOKEN_USER[external.provider as GitProvider], token) : {} };
  }

  private async mirrorPush(migration: MigrationRow, source: GitEndpoint, target: GitEndpoint): Promise<void> {
    // A resumed run finds its own earlier, partial push on the target; only a fresh one requires it empty.
    if (migration.phase !== 'PUSHING') {
      const present = await gitStep("listing the target's branches and tags", () =>
        listRefs(target.location, { env: target.env, limits: this.limits }),
      );
      if (present.size > 0) {
        const names = [...present.keys()];
        throw new MigrationFailure(
          `MIRROR_PUSH needs an empty target, and the target already holds ${names.length} branch(es) or tag(s): ${names.slice(0, 10).join(', ')}${names.length > 10 ? ', ...' : ''}; use RECONFIGURE or an empty repository`,
        );
      }
      await updateMigration(this.db, migration.id, { phase: 'PUSHING' });
    }
    const local = path.isAbsolute(source.location) ? undefined : await fs.mkdtemp(path.join(os.tmpdir(), 'dpc-mirror-'));
    try {
      if (local) {
        await gitStep("cloning the project's repository", () =>
          runGit(['clone', '--quiet', '--mirror', source.location, local], { env: source.env, limits: this.limits }),
        );
      }
      const repository = local ?? source.location;
      // Branches and tags only: a hosted repository holds nothing else, and providers refuse writes to their own refs.
      await gitStep('pushing to the target', () =>
        runGit(['push', '--quiet', '--mirror', target.location], { cwd: repository, env: target.env, limits: this.limits }),
      );
      const [expected, pushed] = await gitStep('checking the pushed branches and tags', () =>
        Promise.all([listRefs(repository), listRefs(target.location, { env: target.env, limits: this.limits })]),
      );
      const wrong = [...expected].filter(([ref, oid]) => pushed.get(ref) !== oid).map(([ref]) => ref);
      const extra = [...pushed.keys()].filter((ref) => !expected.has(ref));
      if (wrong.length || extra.length) {
        throw new MigrationFailure(
          `after the push the target's refs differ from the project's: ${[...wrong, ...extra].slice(0, 10).join(', ')}`,
        );
      }
    } finally {
      if (local) await fs.rm(local, { recursive: true, force: true });
    }
  }

  private async checkBranches(source: GitEndpoint, target: GitEndpoint): Promise<void> {
    const [mine, theirs] = await Promise.all([
      gitStep("listing the project's branches", () => listRefs(source.location, { env: source.env, limits: this.limits })),
      gitStep("listing the target's branches", () => listRefs(target.location, { env: target.env, limits: this.limits })),
    ]);
    const missing = [...mine.keys()]
      .filter((ref) => ref.startsWith('refs/heads/') && !theirs.has(ref))
      .map((ref) => ref.slice('refs/heads/'.length));
    if (missing.length) {
      throw new MigrationFailure(
        `RECONFIGURE needs every branch of the project's repository on the target; missing: ${missing.slice(0, 20).join(', ')}${missing.length > 20 ? ` and ${missing.length - 20} more` : ''}`,
      );
    }
  }

  /** Points the project at the target and ends the migration, together. */
  private async complete(migration: MigrationRow): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      const current = await findMigration(trx, migration.id);
      if (current?.status !== 'IN_PROGRESS') return;
      const token =
        current.tokenRotated && current.sealedToken
          ? this.app.secretBox.seal(
              this.app.secretBox.open(current.sealedToken, sealContext.migration(migration.id)),
              sealContext.projectRepository(migration.projectId),
            )
          : null;
      const row = {
        projectId: migration.projectId,
        cloneUrl: migration.targetCloneUrl,
        provider: migration.targetProvider,
        name: migration.targetName,
        gitCredentialId: migration.gitCredentialId,
        sealedToken: token,
        updatedAt: now(),
      };
      await upsertExternalRepository(trx, row);
      await this.finishIn(trx, migration.id, 'COMPLETED', null);
    });
  }

  /** A failed migration ends; its token is dropped (a completed one's lives on with the project). */
  private finish(migrationId: string, status: 'FAILED', detail: string): Promise<void> {
    return this.db.transaction().execute((trx) => this.finishIn(trx, migrationId, status, detail));
  }

  /** Ends the migration (if still IN_PROGRESS) and announces it, in `trx`. */
  private async finishIn(
    trx: Executor,
    migrationId: string,
    status: 'COMPLETED' | 'FAILED',
    detail: string | null,
  ): Promise<void> {
    const projectId = await finishMigration(trx, migrationId, status, detail);
    const account =
      projectId === undefined
        ? undefined
        : await trx.selectNoFrom((eb) => accountOfProject(eb, projectId).as('accountId')).executeTakeFirst();
    if (projectId !== undefined && account?.accountId) {
      await emit(trx, {
        accountId: account.accountId,
        type: 'repository-migration.finished',
        projectId,
        subject: `projects/${projectId}/repository-migration/${migrationId}`,
        data: { migrationId, status, ...(detail !== null && { detail }) },
      });
    }
  }
}
