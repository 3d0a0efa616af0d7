/** The artifacts' SQL: rows of `artifacts` and `artifactAssets` and nothing else. The rules are the service's (service.ts). */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { Insertable, Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { sql } from '../../core/db/database.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import type { ArtifactAssetTable, ArtifactTable } from './tables.ts';

/** What is shown of a version, and its id. */
export type VersionRow = Pick<
  Selectable<ArtifactTable>,
  'id' | 'branch' | 'commitHash' | 'createdAt' | 'deployedAt' | 'enabled' | 'provider' | 'versionName'
>;
const VERSION_COLUMNS = ['id', 'branch', 'commitHash', 'createdAt', 'deployedAt', 'enabled', 'provider', 'versionName'] as const;

/** Whether the environment has version `versionName`. */
export async function versionExists(db: Executor, environmentId: string, versionName: string): Promise<boolean> {
  const row = await db
    .selectFrom('artifacts')
    .select('id')
    .where('environmentId', '=', environmentId)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  return row !== undefined;
}

/** Inserts an artifact, answering its id. A version taken in the environment is a unique violation. */
export async function insertArtifact(db: Executor, row: Insertable<ArtifactTable>): Promise<number> {
  const { id } = await db.insertInto('artifacts').values(row).returning('id').executeTakeFirstOrThrow();
  return id;
}

/** Inserts a batch of assets. */
export async function insertAssets(db: Executor, rows: ArtifactAssetTable[]): Promise<void> {
  await db.insertInto('artifactAssets').values(rows).execute();
}

/** Copies every asset of artifact `fromId` to artifact `toId`, in the database. */
export async function copyAssets(db: Executor, fromId: number, toId: number): Promise<void> {
  await db
    .insertInto('artifactAssets')
    .columns(['artifactId', 'path', 'content'])
    .expression((eb) =>
      eb
        .selectFrom('artifactAssets')
        // A literal, not a parameter: PostgreSQL would type a bare parameter in a select list as text.
        .select((s) => [s.lit(toId).as('artifactId'), 'path', 'content'])
        .where('artifactId', '=', fromId),
    )
    .execute();
}

/** Version `versionName` of the environment. */
export function findVersion(db: Executor, environmentId: string, versionName: string): Promise<VersionRow | undefined> {
  return db
    .selectFrom('artifacts')
    .select(VERSION_COLUMNS)
    .where('environmentId', '=', environmentId)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
}

/** The environment's latest enabled version (most recently deployed, then latest inserted). */
export function latestEnabledVersion(db: Executor, environmentId: string): Promise<VersionRow | undefined> {
  return db
    .selectFrom('artifacts')
    .select(VERSION_COLUMNS)
    .where('environmentId', '=', environmentId)
    .where('enabled', '=', 1)
    .orderBy('deployedAt', 'desc')
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
}

/** A page of the environment's versions, the most recently deployed first, and how many it has. */
export async function listVersionRows(db: Executor, environmentId: string, query: PageQuery) {
  const inEnvironment = db.selectFrom('artifacts').where('environmentId', '=', environmentId);
  const [rows, total] = await Promise.all([
    inEnvironment
      .select(VERSION_COLUMNS)
      .orderBy('deployedAt', 'desc')
      .orderBy('id', 'desc')
      .limit(query.size)
      .offset(offsetOf(query))
      .execute(),
    countOf(inEnvironment),
  ]);
  return { rows, total };
}

/** How If-Match names a version of an environment (core/conditional.ts). */
export const versionIdentity = (environmentId: string, versionName: string) => `${environmentId}/${versionName}`;

/** The identity and version of the environment's version `versionName`, if there is one. */
export async function versionRowVersion(db: Executor, environmentId: string, versionName: string) {
  const row = await db
    .selectFrom('artifacts')
    .select('rowVersion')
    .where('environmentId', '=', environmentId)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  return row && { id: versionIdentity(environmentId, versionName), version: Number(row.rowVersion) };
}

/**
 * Sets whether the environment's version `versionName` is enabled, one version on; whether there was one. Where
 * the request's If-Match check saw a version of this row, only that version is changed (a 412 when another
 * write came between: core/conditional.ts).
 */
export async function updateVersionEnabled(
  db: Executor,
  environmentId: string,
  versionName: string,
  enabled: boolean,
): Promise<boolean> {
  const id = versionIdentity(environmentId, versionName);
  const expected = expectedRowVersion('artifacts', id);
  let update = db
    .updateTable('artifacts')
    .set({ enabled: enabled ? 1 : 0, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('environmentId', '=', environmentId)
    .where('versionName', '=', versionName);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('artifacts', id, result.numUpdatedRows > 0n);
  return result.numUpdatedRows > 0n;
}

/** A page of the paths of an artifact's files that end in one of `suffixes`, by path, and how many there are. */
export async function assetPathsEndingIn(db: Executor, artifactId: number, suffixes: readonly string[], query: PageQuery) {
  // substr from length - n + 1 ends both stores' strings alike (LIKE is case-insensitive on SQLite only).
  const matching = db
    .selectFrom('artifactAssets')
    .where('artifactId', '=', artifactId)
    .where((eb) =>
      eb.or(
        suffixes.map(
          (suffix) => sql<boolean>`substr(${eb.ref('path')}, length(${eb.ref('path')}) - ${suffix.length - 1}) = ${suffix}`,
        ),
      ),
    );
  const [rows, total] = await Promise.all([
    matching.select('path').orderBy('path').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(matching),
  ]);
  return { paths: rows.map((row) => row.path), total };
}

/** The paths of an artifact's files, in path order. */
export async function artifactFilePaths(db: Executor, artifactId: number): Promise<string[]> {
  const rows = await db
    .selectFrom('artifactAssets')
    .select('path')
    .where('artifactId', '=', artifactId)
    .orderBy('path')
    .execute();
  return rows.map((row) => row.path);
}

/** The content of file `path` of an artifact, if it has one. */
export async function assetContent(db: Executor, artifactId: number, path: string): Promise<Buffer | undefined> {
  const row = await db
    .selectFrom('artifactAssets')
    .select('content')
    .where('artifactId', '=', artifactId)
    .where('path', '=', path)
    .executeTakeFirst();
  return row?.content;
}

/** The text of file `path` of an artifact (one that artifactFilePaths listed). */
export async function artifactFileText(db: Executor, artifactId: number, path: string): Promise<string> {
  const row = await db
    .selectFrom('artifactAssets')
    .select('content')
    .where('artifactId', '=', artifactId)
    .where('path', '=', path)
    .executeTakeFirstOrThrow();
  return row.content.toString('utf8');
}
