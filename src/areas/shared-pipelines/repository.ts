/** The shared pipelines' SQL: rows of `sharedPipelineArtifacts` and `sharedPipelines` and nothing else. The rules are the service's (service.ts). */
import type { Insertable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import type { SharedPipelineArtifactTable, SharedPipelineTable } from './tables.ts';

/** Whether the account has version `versionName` of the prefix. */
export async function versionExists(db: Executor, accountId: string, prefix: string, versionName: string): Promise<boolean> {
  const row = await db
    .selectFrom('sharedPipelineArtifacts')
    .select('id')
    .where('accountId', '=', accountId)
    .where('sharedPipelineIdPrefix', '=', prefix)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  return row !== undefined;
}

/** Inserts a version, answering its id. A version name taken for the account's prefix is a unique violation. */
export async function insertVersion(db: Executor, row: Insertable<SharedPipelineArtifactTable>): Promise<number> {
  const { id } = await db.insertInto('sharedPipelineArtifacts').values(row).returning('id').executeTakeFirstOrThrow();
  return id;
}

/** Inserts one shared pipeline of a version. */
export async function insertSharedPipeline(db: Executor, row: Insertable<SharedPipelineTable>): Promise<void> {
  await db.insertInto('sharedPipelines').values(row).execute();
}

/** Sets whether the account's version `versionName` of the prefix is enabled; whether there was one. */
export async function updateVersionEnabled(
  db: Executor,
  accountId: string,
  prefix: string,
  versionName: string,
  enabled: boolean,
): Promise<boolean> {
  const result = await db
    .updateTable('sharedPipelineArtifacts')
    .set({ enabled: enabled ? 1 : 0 })
    .where('accountId', '=', accountId)
    .where('sharedPipelineIdPrefix', '=', prefix)
    .where('versionName', '=', versionName)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The account's version `versionName` of the prefix, or without a name its most recently published one. */
export function findVersion(db: Executor, accountId: string, prefix: string, versionName: string | undefined) {
  const query = db
    .selectFrom('sharedPipelineArtifacts')
    .select(['id', 'branch', 'commitHash', 'createdAt', 'enabled', 'provider', 'sharedPipelineIdPrefix', 'versionName'])
    .where('accountId', '=', accountId)
    .where('sharedPipelineIdPrefix', '=', prefix);
  return (
    versionName === undefined
      ? query.orderBy('createdAt', 'desc').orderBy('id', 'desc').limit(1)
      : query.where('versionName', '=', versionName)
  ).executeTakeFirst();
}

/** The shared pipelines of a version, by id, without their content. */
export function sharedPipelinesOf(db: Executor, artifactId: number) {
  return db
    .selectFrom('sharedPipelines')
    .select(['description', 'sharedPipelineId', 'sourcePipeline'])
    .where('artifactId', '=', artifactId)
    .orderBy('sharedPipelineId')
    .execute();
}
