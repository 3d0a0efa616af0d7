/**
 * The shared pipelines' rules: pipeline files only, each read (bounded) as a YAML mapping with its description,
 * one version name per prefix of the account, the most recent version by default. The SQL is the repository's.
 */
import { parseBoundedYaml, PIPELINE_YAML_BOUNDS } from '../../contract/bounded-yaml.ts';
import type { Db, Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import type { IgnoredResource, PartRule, StagedPart, StagedUpload } from '../artifacts/index.ts';
import { PIPELINE_FILE, type SharedPipelineArtifactDetails } from './schemas.ts';
import {
  findVersion,
  insertSharedPipeline,
  insertVersion,
  sharedPipelinesOf,
  updateVersionEnabled,
  versionExists,
} from './repository.ts';

/** Only pipeline files are taken from an upload. */
export const pipelineFilesOnly: PartRule = (path) =>
  PIPELINE_FILE.test(path) ? undefined : 'not a pipeline file (.orch.yaml or .tran.yaml)';

const versionTaken = (prefix: string, versionName: string) =>
  conflict(`Version "${versionName}" of shared pipelines "${prefix}" already exists.`);
const versionUnknown = (prefix: string, versionName?: string) =>
  notFound(
    versionName
      ? `Version "${versionName}" of shared pipelines "${prefix}" does not exist.`
      : `No version of shared pipelines "${prefix}" exists.`,
  );

/** A 409 before an upload is read, when its version is already taken (the unique key decides at commit). */
export async function requireVersionFree(db: Executor, accountId: string, prefix: string, versionName: string): Promise<void> {
  if (await versionExists(db, accountId, prefix, versionName)) throw versionTaken(prefix, versionName);
}

export interface NewSharedPipelineArtifact {
  accountId: string;
  sharedPipelineIdPrefix: string;
  versionName: string;
  branch?: string;
  commitHash?: string;
}

/** A staged pipeline file that is a YAML mapping, and its `description`. */
export interface DescribedPipeline {
  part: StagedPart;
  description: string;
}

/**
 * Reads each staged pipeline file (bounded: see parseBoundedYaml) and keeps those that are YAML mappings,
 * with their top-level `description`; the others are added to `ignored` with the reason. It runs before
 * the transaction, so parsing never holds the store's write lock.
 */
async function describePipelines(upload: StagedUpload, ignored: IgnoredResource[]): Promise<DescribedPipeline[]> {
  const described: DescribedPipeline[] = [];
  for (const part of upload.parts) {
    const parsed = parseBoundedYaml((await upload.content(part)).toString('utf8'), PIPELINE_YAML_BOUNDS);
    if ('refused' in parsed) {
      ignored.push({ name: part.path, reason: `not a pipeline: ${parsed.refused}` });
    } else if (typeof parsed.value !== 'object' || parsed.value === null || Array.isArray(parsed.value)) {
      ignored.push({ name: part.path, reason: 'not a pipeline: not a YAML mapping' });
    } else {
      const description = (parsed.value as Record<string, unknown>).description;
      described.push({ part, description: typeof description === 'string' ? description : '' });
    }
  }
  return described;
}

/**
 * Publishes the version: reads the staged pipeline files (before the transaction, so parsing never holds the
 * store's write lock), then stores the version and one shared pipeline per pipeline file in one transaction,
 * whole or not at all. Answers the parts that were not taken, with the reason.
 */
export async function publishSharedPipelines(
  db: Db,
  artifact: NewSharedPipelineArtifact,
  upload: StagedUpload,
): Promise<IgnoredResource[]> {
  const ignored = [...upload.ignored];
  const pipelines = await describePipelines(upload, ignored);
  await db.transaction().execute((trx) => storeVersion(trx, artifact, upload, pipelines));
  return ignored;
}

/** Stores the version and one shared pipeline per described pipeline file. */
async function storeVersion(
  trx: Executor,
  artifact: NewSharedPipelineArtifact,
  upload: StagedUpload,
  pipelines: DescribedPipeline[],
): Promise<void> {
  let artifactId: number;
  try {
    artifactId = await insertVersion(trx, {
      accountId: artifact.accountId,
      sharedPipelineIdPrefix: artifact.sharedPipelineIdPrefix,
      versionName: artifact.versionName,
      branch: artifact.branch ?? null,
      commitHash: artifact.commitHash ?? null,
      provider: 'upload',
      enabled: 1,
      createdAt: now(),
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw versionTaken(artifact.sharedPipelineIdPrefix, artifact.versionName);
    throw error;
  }
  // One row per pipeline: pipeline files are few and each is bounded by the part size limit.
  for (const { part, description } of pipelines) {
    const content = await upload.content(part);
    await insertSharedPipeline(trx, {
      artifactId,
      sharedPipelineId: `${artifact.sharedPipelineIdPrefix}/${part.path.replace(PIPELINE_FILE, '')}`,
      sourcePipeline: part.path,
      description,
      content,
    });
  }
}

export async function setSharedPipelinesEnabled(
  db: Executor,
  accountId: string,
  prefix: string,
  versionName: string,
  enabled: boolean,
): Promise<void> {
  if (!(await updateVersionEnabled(db, accountId, prefix, versionName, enabled))) throw versionUnknown(prefix, versionName);
}

/** Version `versionName` of the prefix, or its most recently published version when none is named. */
export async function getSharedPipelines(db: Executor, accountId: string, prefix: string, versionName?: string) {
  const row = await findVersion(db, accountId, prefix, versionName);
  if (!row) throw versionUnknown(prefix, versionName);
  const pipelines = await sharedPipelinesOf(db, row.id);
  const artifactDetails: SharedPipelineArtifactDetails = {
    ...(row.branch !== null && { branch: row.branch }),
    ...(row.commitHash !== null && { commitHash: row.commitHash }),
    createdAt: row.createdAt,
    enabled: row.enabled === 1,
    provider: row.provider,
    sharedPipelineIdPrefix: row.sharedPipelineIdPrefix,
    versionName: row.versionName,
  };
  return { artifactDetails, sharedPipelines: pipelines };
}
