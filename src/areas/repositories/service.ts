import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { credentialIn } from '../../core/credentials.ts';
import { badRequest, conflict, notFound } from '../../core/problems.ts';
import type { SecretBox } from '../../core/secret-box.ts';
import {
  deleteGitCredentialRow,
  findGitCredential,
  findMigration,
  gitCredentialsOf,
  insertGitCredential,
  upsertExternalRepository,
  type ExternalRepository,
  type GitCredentialRow,
  type MigrationRow,
} from './repository.ts';
import type {
  CreateGitCredentialRequest,
  GitCredential,
  GitProvider,
  MigrationResult,
  ProjectRepository,
  SetProjectRepositoryRequest,
} from './schemas.ts';

/*
 * The rules of enterprise OAuth connections, projects' repositories and migrations' answers; the SQL is
 * in repository.ts.
 */

/** What each sealed value is bound to, so that a value copied to another row does not open there. */
export const sealContext = {
  credential: (id: string) => `git-credentials:${id}`,
  projectRepository: (projectId: string) => `project-repositories:${projectId}`,
  migration: (id: string) => `repository-migrations:${id}`,
};

function toCredential(row: GitCredentialRow): GitCredential {
  return {
    id: row.id,
    name: row.name,
    provider: row.provider as GitProvider,
    type: row.credentialType as GitCredential['type'],
    ...(row.clientId !== null && { clientId: row.clientId }),
    createdAt: row.createdAt,
  };
}

export async function createGitCredential(
  db: Executor,
  box: SecretBox,
  accountId: string,
  request: CreateGitCredentialRequest,
): Promise<GitCredential> {
  const secret = request.type === 'TOKEN' ? request.token : request.clientSecret;
  const misplaced =
    request.type === 'TOKEN'
      ? [request.clientId !== undefined && 'body.clientId', request.clientSecret !== undefined && 'body.clientSecret']
      : [request.token !== undefined && 'body.token', request.clientId === undefined && 'body.clientId'];
  const violations = [
    ...(secret === undefined
      ? [`body.${request.type === 'TOKEN' ? 'token' : 'clientSecret'}: required for type ${request.type}`]
      : []),
    ...misplaced
      .filter((v): v is string => typeof v === 'string')
      .map(
        (v) => `${v}: ${v === 'body.clientId' && request.type === 'APP' ? 'required' : 'not allowed'} for type ${request.type}`,
      ),
  ];
  if (violations.length)
    throw badRequest('A TOKEN connection takes token; an APP connection takes clientId and clientSecret.', violations);
  const id = randomUUID();
  const row = {
    id,
    accountId,
    name: request.name,
    provider: request.provider,
    credentialType: request.type,
    clientId: request.clientId ?? null,
    sealedSecret: box.seal(secret!, sealContext.credential(id)),
    createdAt: now(),
  };
  try {
    await insertGitCredential(db, row);
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`An enterprise OAuth connection named "${request.name}" already exists.`);
    throw error;
  }
  return toCredential({ ...row, seq: 0 });
}

export async function listGitCredentials(db: Executor, accountId: string): Promise<GitCredential[]> {
  return (await gitCredentialsOf(db, accountId)).map(toCredential);
}

export async function requireGitCredential(db: Executor, accountId: string, id: string) {
  const row = await findGitCredential(db, id, accountId);
  if (!row) throw notFound(`Enterprise OAuth connection ${id} does not exist.`);
  return row;
}

export async function deleteGitCredential(db: Executor, accountId: string, id: string): Promise<void> {
  if (!(await deleteGitCredentialRow(db, accountId, id))) throw notFound(`Enterprise OAuth connection ${id} does not exist.`);
}

export function hostedCloneUrl(baseUrl: string, projectId: string): string {
  return `${baseUrl}/dpc/git/${projectId}.git`;
}

export function toProjectRepository(
  baseUrl: string,
  projectId: string,
  external: ExternalRepository | undefined,
): ProjectRepository {
  if (!external) return { hosted: true, cloneUrl: hostedCloneUrl(baseUrl, projectId) };
  return {
    hosted: false,
    cloneUrl: external.cloneUrl,
    provider: external.provider as GitProvider,
    ...(external.name !== null && { name: external.name }),
    ...(external.gitCredentialId !== null && { enterpriseOauthId: external.gitCredentialId }),
  };
}

/**
 * A clone URL the server will reach: http(s), as written with no space or control character (the URL
 * parser would quietly encode or drop them, so the URL stored and the one git is given would differ), and
 * without credentials in it (those belong in a connection): no user name or password, no credential
 * query parameter (src/core/credentials.ts).
 */
export function checkCloneUrl(url: string, field: string): URL {
  if (/[\s\x00-\x1f\x7f]/.test(url)) {
    throw badRequest(`${field} must not contain spaces or control characters.`, [
      `body.${field}: must not contain spaces or control characters (percent-encode them)`,
    ]);
  }
  const parsed = URL.canParse(url) ? new URL(url) : undefined;
  if (!parsed || !['http:', 'https:'].includes(parsed.protocol)) {
    throw badRequest(`${field} must be an http or https clone URL.`, [`body.${field}: must be an http(s) URL`]);
  }
  if (parsed.username || parsed.password) {
    throw badRequest(`${field} must not hold credentials; use an enterprise OAuth connection.`, [
      `body.${field}: must not hold a user name or password`,
    ]);
  }
  const credential = credentialIn(url);
  if (credential) {
    throw badRequest(`${field} must not hold credentials; use an enterprise OAuth connection.`, [
      `body.${field}: holds a credential (${credential})`,
    ]);
  }
  return parsed;
}

/** A connection of the account for `provider`, or a problem saying why it cannot be used. */
export async function requireCredentialFor(db: Executor, accountId: string, id: string, provider: GitProvider, field: string) {
  const credential = await requireGitCredential(db, accountId, id);
  if (credential.provider !== provider) {
    throw badRequest(`Enterprise OAuth connection ${id} is for ${credential.provider}, not ${provider}.`, [
      `body.${field}: must be a connection for ${provider}`,
    ]);
  }
  return credential;
}

export async function setExternalRepository(
  db: Executor,
  accountId: string,
  projectId: string,
  request: SetProjectRepositoryRequest,
): Promise<void> {
  checkCloneUrl(request.cloneUrl, 'cloneUrl');
  if (request.enterpriseOauthId) {
    await requireCredentialFor(db, accountId, request.enterpriseOauthId, request.provider, 'enterpriseOauthId');
  }
  const row = {
    projectId,
    cloneUrl: request.cloneUrl,
    provider: request.provider,
    name: request.name ?? null,
    gitCredentialId: request.enterpriseOauthId ?? null,
    sealedToken: null,
    updatedAt: now(),
  };
  await upsertExternalRepository(db, row);
}

export async function requireMigration(db: Executor, projectId: string, migrationId: string): Promise<MigrationRow> {
  const row = await findMigration(db, migrationId, projectId);
  if (!row) throw notFound(`Repository migration ${migrationId} does not exist in this project.`);
  return row;
}

const NAMED_STATUSES = new Set(['IN_PROGRESS', 'COMPLETED', 'FAILED']);

/** E29's answer; a stored state this release cannot name (a newer release wrote it) is UNKNOWN. */
export function toMigrationResult(row: MigrationRow): MigrationResult {
  return {
    migrationId: row.id,
    status: (NAMED_STATUSES.has(row.status) ? row.status : 'UNKNOWN') as MigrationResult['status'],
    ...(row.detail !== null && { detail: row.detail }),
  };
}
