import type { PortableMigration } from './types.ts';
import { serialKey } from './types.ts';

/**
 * Project artifacts with their assets, and account-wide shared pipeline artifacts with their pipelines.
 * Contents are kept in the database (blob / bytea), so an artifact commits whole in one transaction on
 * either store, and every server process sharing a PostgreSQL database sees the same contents.
 */
export const artifacts: PortableMigration = {
  async up(db, dialect) {
    const binary = dialect === 'postgres' ? 'bytea' : 'blob';
    // A column referring to a serialKey() column.
    const serialRef = dialect === 'postgres' ? 'bigint' : 'integer';

    await db.schema
      .createTable('artifacts')
      .addColumn('id', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('environment_id', 'text', (c) => c.notNull().references('environments.id').onDelete('cascade'))
      .addColumn('version_name', 'text', (c) => c.notNull())
      .addColumn('branch', 'text')
      .addColumn('commit_hash', 'text')
      .addColumn('provider', 'text', (c) => c.notNull())
      .addColumn('enabled', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('deployed_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('artifacts_environment_version', ['environment_id', 'version_name'])
      .execute();
    await db.schema
      .createIndex('artifacts_environment_deployed')
      .on('artifacts')
      .columns(['environment_id', 'deployed_at'])
      .execute();
    await db.schema.createIndex('artifacts_project').on('artifacts').column('project_id').execute();

    await db.schema
      .createTable('artifact_assets')
      .addColumn('artifact_id', serialRef, (c) => c.notNull().references('artifacts.id').onDelete('cascade'))
      .addColumn('path', 'text', (c) => c.notNull())
      .addColumn('content', binary, (c) => c.notNull())
      .addPrimaryKeyConstraint('artifact_assets_pk', ['artifact_id', 'path'])
      .execute();

    await db.schema
      .createTable('shared_pipeline_artifacts')
      .addColumn('id', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('shared_pipeline_id_prefix', 'text', (c) => c.notNull())
      .addColumn('version_name', 'text', (c) => c.notNull())
      .addColumn('branch', 'text')
      .addColumn('commit_hash', 'text')
      .addColumn('provider', 'text', (c) => c.notNull())
      .addColumn('enabled', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('shared_pipeline_artifacts_version', ['account_id', 'shared_pipeline_id_prefix', 'version_name'])
      .execute();

    await db.schema
      .createTable('shared_pipelines')
      .addColumn('artifact_id', serialRef, (c) => c.notNull().references('shared_pipeline_artifacts.id').onDelete('cascade'))
      .addColumn('shared_pipeline_id', 'text', (c) => c.notNull())
      .addColumn('source_pipeline', 'text', (c) => c.notNull())
      .addColumn('description', 'text', (c) => c.notNull())
      .addColumn('content', binary, (c) => c.notNull())
      .addPrimaryKeyConstraint('shared_pipelines_pk', ['artifact_id', 'shared_pipeline_id'])
      .execute();
  },
};
