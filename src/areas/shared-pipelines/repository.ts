import { parseBoundedYaml, PIPELINE_YAML_BOUNDS } from '../../contract/bounded-yaml.ts';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import type { IgnoredResource, StagedPart, StagedUpload } from '../artifacts/index.ts';
import { PIPELINE_FILE, type SharedPipelineArtifactDetails } from './schemas.ts';

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
  const row = await db
    .selectFrom('sharedPipelineArtifacts')
    .select('id')
    .where('accountId', '=', accountId)
    .where('sharedPipelineIdPrefix', '=', prefix)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  if (row) throw versionTaken(prefix, versionName);
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
export async function describePipelines(upload: StagedUpload, ignored: IgnoredResource[]): Promise<DescribedPipeline[]> {
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
 * Stores the version and one shared pipeline per described pipeline file. Run it in a transaction: the
 * version appears whole or not at all.
 */
export async function publishSharedPipelines(
  trx: Executor,
  artifact: NewSharedPipelineArtifact,
  upload: StagedUpload,
  pipelines: DescribedPipeline[],
): Promise<void> {
  let artifactId: number;
  try {
    ({ id: artifactId } = await trx
      .insertInto('sharedPipelineArtifacts')
      .values({
        accountId: artifact.accountId,
        sharedPipelineIdPrefix: artifact.sharedPipelineIdPrefix,
        versionName: artifact.versionName,
        branch: artifact.branch ?? null,
        commitHash: artifact.commitHash ?? null,
        provider: 'upload',
        enabled: 1,
        createdAt: now(),
      })
      .returning('id')
      .executeTakeFirstOrThrow());
  } catch (error) {
    if (isUniqueViolation(error)) throw versionTaken(artifact.sharedPipelineIdPrefix, artifact.versionName);
    throw error;
  }
  // One row per pipeline: pipeline files are few and each is bounded by the part size limit.
  for (const { part, description } of pipelines) {
    const content = await upload.content(part);
    await trx
      .insertInto('sharedPipelines')
      .values({
        artifactId,
        sharedPipelineId: `${artifact.sharedPipelineIdPrefix}/${part.path.replace(PIPELINE_FILE, '')}`,
        sourcePipeline: part.path,
        description,
        content,
      })
      .execute();
  }
}

export async function setSharedPipelinesEnabled(
  db: Executor,
  accountId: string,
  prefix: string,
  versionName: string,
  enabled: boolean,
): Promise<void> {
  const result = await db
    .updateTable('sharedPipelineArtifacts')
    .set({ enabled: enabled ? 1 : 0 })
    .where('accountId', '=', accountId)
    .where('sharedPipelineIdPrefix', '=', prefix)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  if (result.numUpdatedRows === 0n) throw versionUnknown(prefix, versionName);
}

/** Version `versionName` of the prefix, or its most recently published version when none is named. */
export async function getSharedPipelines(db: Executor, accountId: string, prefix: string, versionName?: string) {
  let query = db
    .selectFrom('sharedPipelineArtifacts')
    .select(['id', 'branch', 'commitHash', 'createdAt', 'enabled', 'provider', 'sharedPipelineIdPrefix', 'versionName'])
    .where('accountId', '=', accountId)
    .where('sharedPipelineIdPrefix', '=', prefix);
  query =
    versionName === undefined
      ? query.orderBy('createdAt', 'desc').orderBy('id', 'desc').limit(1)
      : query.where('versionName', '=', versionName);
  const row = await query.executeTakeFirst();
  if (!row) throw versionUnknown(prefix, versionName);
  const pipelines = await db
    .selectFrom('sharedPipelines')
    .select(['description', 'sharedPipelineId', 'sourcePipeline'])
    .where('artifactId', '=', row.id)
    .orderBy('sharedPipelineId')
    .execute();
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
