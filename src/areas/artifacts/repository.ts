import type { Executor } from '../../core/db/database.ts';
import { PIPELINE_SUFFIXES } from '../../contract/pipeline-file.ts';
import { isUniqueViolation, now, sql } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import type { ArtifactTable } from './tables.ts';
import type { ArtifactDetails } from './schemas.ts';
import { CONNECTOR_PROFILE_PREFIX } from './schemas.ts';
import type { IgnoredResource, StagedUpload } from './upload.ts';

/** Rows are inserted in batches of at most this many rows and bytes: few round trips, bounded memory. */
const BATCH_ROWS = 500;
const BATCH_BYTES = 4 * 1024 * 1024;

type DetailsRow = Pick<
  ArtifactTable,
  'branch' | 'commitHash' | 'createdAt' | 'deployedAt' | 'enabled' | 'provider' | 'versionName'
>;
const DETAILS_COLUMNS = ['branch', 'commitHash', 'createdAt', 'deployedAt', 'enabled', 'provider', 'versionName'] as const;

function toDetails(row: DetailsRow): ArtifactDetails {
  return {
    ...(row.branch !== null && { branch: row.branch }),
    ...(row.commitHash !== null && { commitHash: row.commitHash }),
    createdAt: row.createdAt,
    deployedAt: row.deployedAt,
    enabled: row.enabled === 1,
    provider: row.provider,
    versionName: row.versionName,
  };
}

const versionTaken = (versionName: string) => conflict(`Version "${versionName}" already exists in this environment.`);

/** A 409 before an upload is read, when its version is already taken (the unique key decides at commit). */
export async function requireVersionFree(db: Executor, environmentId: string, versionName: string): Promise<void> {
  const row = await db
    .selectFrom('artifacts')
    .select('id')
    .where('environmentId', '=', environmentId)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  if (row) throw versionTaken(versionName);
}

export interface NewArtifact {
  projectId: string;
  environmentId: string;
  versionName: string;
  branch?: string;
  commitHash?: string;
}

/**
 * Stores the artifact and every staged part as an asset; connector profiles that are not JSON are
 * added to `ignored` instead. Run it in a transaction: the artifact appears whole or not at all.
 */
export async function createArtifact(trx: Executor, artifact: NewArtifact, upload: StagedUpload): Promise<IgnoredResource[]> {
  const createdAt = now();
  let artifactId: number;
  try {
    ({ id: artifactId } = await trx
      .insertInto('artifacts')
      .values({
        projectId: artifact.projectId,
        environmentId: artifact.environmentId,
        versionName: artifact.versionName,
        branch: artifact.branch ?? null,
        commitHash: artifact.commitHash ?? null,
        provider: 'upload',
        enabled: 1,
        createdAt,
        deployedAt: createdAt,
      })
      .returning('id')
      .executeTakeFirstOrThrow());
  } catch (error) {
    if (isUniqueViolation(error)) throw versionTaken(artifact.versionName);
    throw error;
  }

  const ignored = [...upload.ignored];
  for await (const batch of upload.batches(BATCH_ROWS, BATCH_BYTES)) {
    const rows = [];
    for (const { part, content } of batch) {
      if (part.path.startsWith(CONNECTOR_PROFILE_PREFIX) && !isJson(content)) {
        ignored.push({ name: part.path, reason: 'connector profile is not valid JSON' });
      } else {
        rows.push({ artifactId, path: part.path, content });
      }
    }
    if (rows.length > 0) await trx.insertInto('artifactAssets').values(rows).execute();
  }
  return ignored;
}

function isJson(content: Buffer): boolean {
  try {
    JSON.parse(content.toString('utf8'));
    return true;
  } catch {
    return false;
  }
}

/** Version `versionName` of the environment, or without a name its latest enabled version (most recently deployed); else a 404. */
export async function requireArtifact(db: Executor, environmentId: string, versionName: string | undefined) {
  const inEnvironment = db
    .selectFrom('artifacts')
    .select(['id', ...DETAILS_COLUMNS])
    .where('environmentId', '=', environmentId);
  const row = await (
    versionName === undefined
      ? inEnvironment.where('enabled', '=', 1).orderBy('deployedAt', 'desc').orderBy('id', 'desc').limit(1)
      : inEnvironment.where('versionName', '=', versionName)
  ).executeTakeFirst();
  if (!row) {
    throw notFound(
      versionName === undefined
        ? 'This environment has no enabled version.'
        : `Version "${versionName}" does not exist in this environment.`,
    );
  }
  return row;
}

/** File name endings of pipelines: orchestration and transformation. */
const PIPELINE_EXTENSIONS = [PIPELINE_SUFFIXES.orchestration, PIPELINE_SUFFIXES.transformation];

/**
 * The pipeline files of the environment's latest enabled version, by path, with the time that version
 * was deployed; an environment with no enabled version has none.
 */
export async function listPublishedPipelines(db: Executor, environmentId: string, query: PageQuery) {
  const latest = await db
    .selectFrom('artifacts')
    .select(['id', 'deployedAt'])
    .where('environmentId', '=', environmentId)
    .where('enabled', '=', 1)
    .orderBy('deployedAt', 'desc')
    .orderBy('id', 'desc')
    .executeTakeFirst();
  if (!latest) return { results: [], total: 0 };
  // substr from length - n + 1 ends both stores' strings alike (LIKE is case-insensitive on SQLite only).
  const pipelines = db
    .selectFrom('artifactAssets')
    .where('artifactId', '=', latest.id)
    .where((eb) =>
      eb.or(
        PIPELINE_EXTENSIONS.map(
          (extension) =>
            sql<boolean>`substr(${eb.ref('path')}, length(${eb.ref('path')}) - ${extension.length - 1}) = ${extension}`,
        ),
      ),
    );
  const [rows, total] = await Promise.all([
    pipelines.select('path').orderBy('path').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(pipelines),
  ]);
  return { results: rows.map((row) => ({ name: row.path, publishedTime: latest.deployedAt })), total };
}

/** The artifacts of an environment, the most recently deployed first. */
export async function listArtifacts(db: Executor, environmentId: string, query: PageQuery) {
  const inEnvironment = db.selectFrom('artifacts').where('environmentId', '=', environmentId);
  const [rows, total] = await Promise.all([
    inEnvironment
      .select([...DETAILS_COLUMNS])
      .orderBy('deployedAt', 'desc')
      .orderBy('id', 'desc')
      .limit(query.size)
      .offset(offsetOf(query))
      .execute(),
    countOf(inEnvironment),
  ]);
  return { results: rows.map(toDetails), total };
}

export async function getArtifact(db: Executor, environmentId: string, versionName: string | undefined) {
  const row = await requireArtifact(db, environmentId, versionName);
  const assets = await db.selectFrom('artifactAssets').select('path').where('artifactId', '=', row.id).orderBy('path').execute();
  return { assets: assets.map((a) => a.path), details: toDetails(row) };
}

export async function getAssetContent(
  db: Executor,
  environmentId: string,
  versionName: string,
  assetPath: string,
): Promise<Buffer> {
  const { id } = await requireArtifact(db, environmentId, versionName);
  const row = await db
    .selectFrom('artifactAssets')
    .select('content')
    .where('artifactId', '=', id)
    .where('path', '=', assetPath)
    .executeTakeFirst();
  if (!row) throw notFound(`Version "${versionName}" has no asset "${assetPath}".`);
  return row.content;
}

/**
 * Copies version `versionName` of the source environment, assets and all, into the target environment
 * (copied in the database, never through memory). A version reaches an environment once: a repeat is 409.
 */
export async function promoteArtifact(
  trx: Executor,
  projectId: string,
  sourceEnvironmentId: string,
  targetEnvironmentId: string,
  versionName: string,
) {
  const source = await requireArtifact(trx, sourceEnvironmentId, versionName);
  let targetId: number;
  try {
    ({ id: targetId } = await trx
      .insertInto('artifacts')
      .values({
        projectId,
        environmentId: targetEnvironmentId,
        versionName,
        branch: source.branch,
        commitHash: source.commitHash,
        provider: 'promotion',
        enabled: 1,
        createdAt: source.createdAt,
        deployedAt: now(),
      })
      .returning('id')
      .executeTakeFirstOrThrow());
  } catch (error) {
    if (isUniqueViolation(error)) throw versionTaken(versionName);
    throw error;
  }
  await trx
    .insertInto('artifactAssets')
    .columns(['artifactId', 'path', 'content'])
    .expression((eb) =>
      eb
        .selectFrom('artifactAssets')
        // A literal, not a parameter: PostgreSQL would type a bare parameter in a select list as text.
        .select((s) => [s.lit(targetId).as('artifactId'), 'path', 'content'])
        .where('artifactId', '=', source.id),
    )
    .execute();
}

export async function setArtifactEnabled(
  db: Executor,
  environmentId: string,
  versionName: string,
  enabled: boolean,
): Promise<void> {
  const result = await db
    .updateTable('artifacts')
    .set({ enabled: enabled ? 1 : 0 })
    .where('environmentId', '=', environmentId)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  if (result.numUpdatedRows === 0n) throw notFound(`Version "${versionName}" does not exist in this environment.`);
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
