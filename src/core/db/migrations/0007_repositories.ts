import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';
import { serialKey } from './types.ts';

/** Projects' external repositories, the account's git-provider credentials, and repository migrations. */
export const repositories: PortableMigration = {
  async up(db, dialect) {
    await db.schema
      .createTable('git_credentials')
      .addColumn('seq', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('provider', 'text', (c) => c.notNull())
      .addColumn('credential_type', 'text', (c) => c.notNull())
      .addColumn('client_id', 'text')
      .addColumn('sealed_secret', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('git_credentials_account_name', ['account_id', 'name'])
      .execute();

    await db.schema
      .createTable('project_repositories')
      .addColumn('project_id', 'text', (c) => c.primaryKey().references('projects.id').onDelete('cascade'))
      .addColumn('clone_url', 'text', (c) => c.notNull())
      .addColumn('provider', 'text', (c) => c.notNull())
      .addColumn('name', 'text')
      .addColumn('git_credential_id', 'text', (c) => c.references('git_credentials.id').onDelete('set null'))
      .addColumn('sealed_token', 'text')
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('repository_migrations')
      .addColumn('seq', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('mode', 'text', (c) => c.notNull())
      .addColumn('target_clone_url', 'text', (c) => c.notNull())
      .addColumn('target_provider', 'text', (c) => c.notNull())
      .addColumn('target_name', 'text', (c) => c.notNull())
      .addColumn('git_credential_id', 'text')
      .addColumn('provider_parameters', 'text', (c) => c.notNull())
      .addColumn('sealed_token', 'text')
      .addColumn('token_rotated', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('phase', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('detail', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('finished_at', 'text')
      .execute();
    // At most one migration in progress per project, whichever server instance starts it: the store decides.
    await db.schema
      .createIndex('repository_migrations_one_in_progress')
      .on('repository_migrations')
      .column('project_id')
      .unique()
      .where(sql.ref('status'), '=', 'IN_PROGRESS')
      .execute();
  },
};
