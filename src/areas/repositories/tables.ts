import type { Generated } from 'kysely';

/** A credential of the account for a git provider (an "enterprise OAuth connection"); the secret only sealed. */
export interface GitCredentialTable {
  seq: Generated<number>;
  id: string;
  accountId: string;
  name: string;
  provider: string;
  /** TOKEN (a personal or service access token) or APP (an application's client id and secret). */
  credentialType: string;
  clientId: string | null;
  /** The token or the client secret, sealed by the secret box. */
  sealedSecret: string;
  createdAt: string;
}

/** A project whose repository is external; a project without a row uses its hosted repository. */
export interface ProjectRepositoryTable {
  projectId: string;
  cloneUrl: string;
  provider: string;
  name: string | null;
  gitCredentialId: string | null;
  /** A token of this repository alone (a gitlab token rotated by a migration), sealed. */
  sealedToken: string | null;
  updatedAt: string;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion: Generated<number>;
}

export interface RepositoryMigrationTable {
  seq: Generated<number>;
  id: string;
  projectId: string;
  mode: string;
  targetCloneUrl: string;
  targetProvider: string;
  targetName: string;
  gitCredentialId: string | null;
  /** JSON object of strings. */
  providerParameters: string;
  /** The Git-Provider-Access-Token, sealed; after rotation, the rotated token. */
  sealedToken: string | null;
  tokenRotated: number;
  /** How far the background work got (QUEUED, PUSHING), so a resumed run knows what it may have left. */
  phase: string;
  status: string;
  detail: string | null;
  createdAt: string;
  finishedAt: string | null;
}

export interface RepositoryTables {
  gitCredentials: GitCredentialTable;
  projectRepositories: ProjectRepositoryTable;
  repositoryMigrations: RepositoryMigrationTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends RepositoryTables {}
}
