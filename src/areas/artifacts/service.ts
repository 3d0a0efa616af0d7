/**
 * The artifacts' rules: which environment of the caller's project a version belongs to, one version name per
 * environment, connector profiles that must be JSON, the latest enabled version, promotion by copy, and the
 * `artifact.published` event. The SQL is the repository's.
 */
import type { Executor } from '../../core/db/database.ts';
import { PIPELINE_SUFFIXES } from '../../contract/pipeline-file.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { emit } from '../../core/outbox.ts';
import { conflict, notFound } from '../../core/problems.ts';
import type { PageQuery } from '../../core/paging.ts';
import { requireProject } from '../projects/index.ts';
import { environmentIdsByName, requireEnvironmentId } from '../environments/index.ts';
import type { ArtifactDetails } from './schemas.ts';
import { CONNECTOR_PROFILE_CONTENT_TYPE, CONNECTOR_PROFILE_NAME, CONNECTOR_PROFILE_PREFIX } from './schemas.ts';
import type { IgnoredResource, PartRule, StagedUpload } from './upload.ts';
import {
  artifactFilePaths,
  assetContent,
  assetPathsEndingIn,
  copyAssets,
  findVersion,
  insertArtifact,
  insertAssets,
  latestEnabledVersion,
  listVersionRows,
  updateVersionEnabled,
  versionExists,
  versionRowVersion,
  type VersionRow,
} from './repository.ts';

/** Rows are inserted in batches of at most this many rows and bytes: few round trips, bounded memory. */
const BATCH_ROWS = 500;
const BATCH_BYTES = 4 * 1024 * 1024;

function toDetails(row: VersionRow): ArtifactDetails {
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
const noVersion = (versionName: string) => notFound(`Version "${versionName}" does not exist in this environment.`);

/** Runs `insert`, answering a unique violation (a version name taken in the environment) as 409. */
async function withFreeVersion<T>(versionName: string, insert: () => Promise<T>): Promise<T> {
  try {
    return await insert();
  } catch (error) {
    if (isUniqueViolation(error)) throw versionTaken(versionName);
    throw error;
  }
}

/** The id of environment `environmentName` of the caller's project, or a 404 for either. */
export async function requireEnvironment(
  db: Executor,
  accountId: string,
  projectId: string,
  environmentName: string,
): Promise<string> {
  await requireProject(db, accountId, projectId);
  return requireEnvironmentId(db, projectId, environmentName);
}

/** How connector profile parts are named (the upload's description says it too). */
export const PROFILE_NAMES = 'connector-profile:flex-<id>.json or connector-profile:custom-<id>.json';

/** Connector profiles travel as parts of their own content type and name; neither goes without the other. */
export const connectorProfileRule: PartRule = (path, contentType) => {
  const profileType = contentType === CONNECTOR_PROFILE_CONTENT_TYPE;
  if (path.startsWith(CONNECTOR_PROFILE_PREFIX)) {
    if (!CONNECTOR_PROFILE_NAME.test(path)) return `not a connector profile name: ${PROFILE_NAMES}`;
    if (!profileType) return `a connector profile part needs content type ${CONNECTOR_PROFILE_CONTENT_TYPE}`;
  } else if (profileType) {
    return `a connector profile part is named ${PROFILE_NAMES}`;
  }
  return undefined;
};

/** A 409 before an upload is read, when its version is already taken (the unique key decides at commit). */
export async function requireVersionFree(db: Executor, environmentId: string, versionName: string): Promise<void> {
  if (await versionExists(db, environmentId, versionName)) throw versionTaken(versionName);
}

export interface NewArtifact {
  accountId: string;
  projectId: string;
  environmentName: string;
  versionName: string;
  branch?: string;
  commitHash?: string;
}

/**
 * Stores the artifact and every staged part as an asset, and emits `artifact.published`; connector profiles
 * that are not JSON are added to `ignored` instead. Run it in a transaction: the artifact appears whole or not at all.
 */
export async function publishArtifact(trx: Executor, artifact: NewArtifact, upload: StagedUpload): Promise<IgnoredResource[]> {
  const { accountId, projectId, environmentName, versionName } = artifact;
  const environmentId = await requireEnvironment(trx, accountId, projectId, environmentName);
  const createdAt = now();
  const artifactId = await withFreeVersion(versionName, () =>
    insertArtifact(trx, {
      projectId,
      environmentId,
      versionName,
      branch: artifact.branch ?? null,
      commitHash: artifact.commitHash ?? null,
      provider: 'upload',
      enabled: 1,
      createdAt,
      deployedAt: createdAt,
    }),
  );

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
    if (rows.length > 0) await insertAssets(trx, rows);
  }
  await emit(trx, {
    accountId,
    type: 'artifact.published',
    projectId,
    subject: `projects/${projectId}/artifacts/${encodeURIComponent(environmentName)}/${encodeURIComponent(versionName)}`,
    data: {
      environmentName,
      versionName,
      branch: artifact.branch ?? null,
      commitHash: artifact.commitHash ?? null,
    },
  });
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
  const row =
    versionName === undefined ? await latestEnabledVersion(db, environmentId) : await findVersion(db, environmentId, versionName);
  if (!row) throw versionName === undefined ? notFound('This environment has no enabled version.') : noVersion(versionName);
  return row;
}

/** File name endings of pipelines: orchestration and transformation. */
const PIPELINE_EXTENSIONS = [PIPELINE_SUFFIXES.orchestration, PIPELINE_SUFFIXES.transformation];

/**
 * The pipeline files of the environment's latest enabled version, by path, with the time that version
 * was deployed; an environment with no enabled version has none.
 */
export async function listPublishedPipelines(db: Executor, environmentId: string, query: PageQuery) {
  const latest = await latestEnabledVersion(db, environmentId);
  if (!latest) return { results: [], total: 0 };
  const { paths, total } = await assetPathsEndingIn(db, latest.id, PIPELINE_EXTENSIONS, query);
  return { results: paths.map((path) => ({ name: path, publishedTime: latest.deployedAt })), total };
}

/** The artifacts of an environment, the most recently deployed first. */
export async function listArtifacts(db: Executor, environmentId: string, query: PageQuery) {
  const { rows, total } = await listVersionRows(db, environmentId, query);
  return { results: rows.map(toDetails), total };
}

export async function getArtifact(db: Executor, environmentId: string, versionName: string | undefined) {
  const row = await requireArtifact(db, environmentId, versionName);
  return { assets: await artifactFilePaths(db, row.id), details: toDetails(row) };
}

export async function getAssetContent(
  db: Executor,
  environmentId: string,
  versionName: string,
  assetPath: string,
): Promise<Buffer> {
  const { id } = await requireArtifact(db, environmentId, versionName);
  const content = await assetContent(db, id, assetPath);
  if (!content) throw notFound(`Version "${versionName}" has no asset "${assetPath}".`);
  return content;
}

/**
 * Copies version `versionName` of the source environment of the caller's project, assets and all, into the
 * target environment (copied in the database, never through memory). A version reaches an environment once:
 * a repeat is 409. Run it in a transaction.
 */
export async function promoteArtifact(
  trx: Executor,
  accountId: string,
  projectId: string,
  request: { sourceEnvironmentName: string; targetEnvironmentName: string; versionName: string },
): Promise<void> {
  const { versionName } = request;
  const sourceEnvironmentId = await requireEnvironment(trx, accountId, projectId, request.sourceEnvironmentName);
  const targetEnvironmentId = await requireEnvironmentId(trx, projectId, request.targetEnvironmentName);
  const source = await requireArtifact(trx, sourceEnvironmentId, versionName);
  const targetId = await withFreeVersion(versionName, () =>
    insertArtifact(trx, {
      projectId,
      environmentId: targetEnvironmentId,
      versionName,
      branch: source.branch,
      commitHash: source.commitHash,
      provider: 'promotion',
      enabled: 1,
      createdAt: source.createdAt,
      deployedAt: now(),
    }),
  );
  await copyAssets(trx, source.id, targetId);
}

/** Enables or disables version `versionName` of environment `environmentName` of the caller's project. */
/** The row and version of an environment's version (named by name), as If-Match compares it (core/conditional.ts). */
export async function artifactVersion(db: Executor, projectId: string, environmentName: string, versionName: string) {
  const environmentId = (await environmentIdsByName(db, projectId, [environmentName])).get(environmentName);
  return environmentId === undefined ? undefined : versionRowVersion(db, environmentId, versionName);
}

export async function setArtifactEnabled(
  db: Executor,
  accountId: string,
  projectId: string,
  { environmentName, versionName, enabled }: { environmentName: string; versionName: string; enabled: boolean },
): Promise<void> {
  const environmentId = await requireEnvironment(db, accountId, projectId, environmentName);
  if (!(await updateVersionEnabled(db, environmentId, versionName, enabled))) throw noVersion(versionName);
}
