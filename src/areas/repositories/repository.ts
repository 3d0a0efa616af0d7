import type { Insertable, Selectable, Updateable } from 'kysely';
import { expectedRowVersion, heldExpectedVersion, NO_ROW } from '../../core/conditional.ts';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import type { GitCredentialTable, ProjectRepositoryTable, RepositoryMigrationTable } from './tables.ts';

/**
 * The repositories area's SQL: enterprise OAuth connections (git credentials), projects' external
 * repositories and repository migrations. The rules are in service.ts and migration.ts.
 */

export type GitCredentialRow = Selectable<GitCredentialTable>;
export type MigrationRow = Selectable<RepositoryMigrationTable>;
export type ExternalRepository = Selectable<ProjectRepositoryTable>;

// ---- Git credentials

export async function insertGitCredential(db: Executor, row: Insertable<GitCredentialTable>): Promise<void> {
  await db.insertInto('gitCredentials').values(row).execute();
}

export function gitCredentialsOf(db: Executor, accountId: string): Promise<GitCredentialRow[]> {
  return db.selectFrom('gitCredentials').selectAll().where('accountId', '=', accountId).orderBy('seq').execute();
}

/** The account's connection `id`; without `accountId`, whichever account's (a migration already checked it). */
export function findGitCredential(db: Executor, id: string, accountId?: string): Promise<GitCredentialRow | undefined> {
  let query = db.selectFrom('gitCredentials').selectAll().where('id', '=', id);
  if (accountId !== undefined) query = query.where('accountId', '=', accountId);
  return query.executeTakeFirst();
}

/** Deletes the account's connection `id`; whether there was one. */
export async function deleteGitCredentialRow(db: Executor, accountId: string, id: string): Promise<boolean> {
  const result = await db.deleteFrom('gitCredentials').where('accountId', '=', accountId).where('id', '=', id).executeTakeFirst();
  return result.numDeletedRows > 0n;
}

// ---- External repositories

/** The project's external repository, or undefined while the server hosts it. */
export function externalRepositoryOf(db: Executor, projectId: string): Promise<ExternalRepository | undefined> {
  return db.selectFrom('projectRepositories').selectAll().where('projectId', '=', projectId).executeTakeFirst();
}

/**
 * The row and version of the project's external repository as If-Match compares it (core/conditional.ts):
 * NO_ROW while the server hosts it (the GET answers that too, and a PUT creates the row).
 */
export async function externalRepositoryVersion(db: Executor, projectId: string) {
  const row = await db
    .selectFrom('projectRepositories')
    .select('rowVersion')
    .where('projectId', '=', projectId)
    .executeTakeFirst();
  return { id: projectId, version: row === undefined ? NO_ROW : Number(row.rowVersion) };
}

/**
 * The project's repository becomes `row` (created or replaced), one version on. Where the request's If-Match
 * check saw a version of it, only that version is replaced, and where it saw none the row is only created: a
 * 412 when another write came between (core/conditional.ts).
 */
export async function upsertExternalRepository(db: Executor, row: Insertable<ProjectRepositoryTable>): Promise<void> {
  const expected = expectedRowVersion('projectRepositories', row.projectId);
  if (expected === undefined) {
    await db
      .insertInto('projectRepositories')
      .values(row)
      .onConflict((oc) =>
        oc.column('projectId').doUpdateSet((eb) => ({ ...row, rowVersion: eb('projectRepositories.rowVersion', '+', 1) })),
      )
      .execute();
  } else if (expected === NO_ROW) {
    let created = true;
    try {
      await db.insertInto('projectRepositories').values(row).execute();
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      created = false;
    }
    heldExpectedVersion('projectRepositories', row.projectId, created);
  } else {
    const result = await db
      .updateTable('projectRepositories')
      .set((eb) => ({ ...row, rowVersion: eb('rowVersion', '+', 1) }))
      .where('projectId', '=', row.projectId)
      .where('rowVersion', '=', expected)
      .executeTakeFirst();
    heldExpectedVersion('projectRepositories', row.projectId, result.numUpdatedRows > 0n);
  }
}

// ---- Migrations

export function findMigration(db: Executor, migrationId: string, projectId?: string): Promise<MigrationRow | undefined> {
  let query = db.selectFrom('repositoryMigrations').selectAll().where('id', '=', migrationId);
  if (projectId !== undefined) query = query.where('projectId', '=', projectId);
  return query.executeTakeFirst();
}

export async function insertMigration(db: Executor, row: Insertable<RepositoryMigrationTable>): Promise<void> {
  await db.insertInto('repositoryMigrations').values(row).execute();
}

export async function updateMigration(
  db: Executor,
  migrationId: string,
  set: Updateable<RepositoryMigrationTable>,
): Promise<void> {
  await db.updateTable('repositoryMigrations').set(set).where('id', '=', migrationId).execute();
}

/** Ends a migration still IN_PROGRESS (its token is of no further use here); its project, or undefined when none ended. */
export async function finishMigration(
  db: Executor,
  migrationId: string,
  status: 'COMPLETED' | 'FAILED',
  detail: string | null,
): Promise<string | undefined> {
  const ended = await db
    .updateTable('repositoryMigrations')
    .set({ status, detail, sealedToken: null, finishedAt: now() })
    .where('id', '=', migrationId)
    .where('status', '=', 'IN_PROGRESS')
    .returning('projectId')
    .executeTakeFirst();
  return ended?.projectId;
}
