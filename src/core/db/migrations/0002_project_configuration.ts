import type { PortableMigration } from './types.ts';

/** Connections and their environment overrides, project variables and theirs, and secret references. */
export const projectConfiguration: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('connections')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('auth_provider', 'text', (c) => c.notNull())
      .addColumn('auth_type', 'text', (c) => c.notNull())
      .addColumn('platform_connection_type', 'text', (c) => c.notNull())
      .addColumn('connection_details', 'text')
      .addColumn('created_by', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('connections_project_name', ['project_id', 'name'])
      .execute();

    await db.schema
      .createTable('connection_overrides')
      .addColumn('connection_id', 'text', (c) => c.notNull().references('connections.id').onDelete('cascade'))
      .addColumn('environment_id', 'text', (c) => c.notNull().references('environments.id').onDelete('cascade'))
      .addColumn('connection_details', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('connection_overrides_key', ['connection_id', 'environment_id'])
      .execute();
    // Cascading an environment's delete looks overrides up by environment.
    await db.schema.createIndex('connection_overrides_environment').on('connection_overrides').column('environment_id').execute();

    await db.schema
      .createTable('project_variables')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('behaviour', 'text', (c) => c.notNull())
      .addColumn('description', 'text')
      .addColumn('value', 'text')
      .addColumn('supports_double_resolution', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      // Also the index the list walks in name order.
      .addUniqueConstraint('project_variables_project_name', ['project_id', 'name'])
      .execute();

    // Kept in the transaction of every variable insert and delete, so that a page's total is one row read.
    await db.schema
      .createTable('project_variable_counts')
      .addColumn('project_id', 'text', (c) => c.primaryKey().references('projects.id').onDelete('cascade'))
      .addColumn('total', 'integer', (c) => c.notNull())
      .execute();

    await db.schema
      .createTable('variable_overrides')
      .addColumn('variable_id', 'text', (c) => c.notNull().references('project_variables.id').onDelete('cascade'))
      .addColumn('environment_id', 'text', (c) => c.notNull().references('environments.id').onDelete('cascade'))
      .addColumn('value', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('variable_overrides_key', ['variable_id', 'environment_id'])
      .execute();
    await db.schema.createIndex('variable_overrides_environment').on('variable_overrides').column('environment_id').execute();

    await db.schema
      .createTable('secret_references')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('secret_name', 'text', (c) => c.notNull())
      .addColumn('secret_key', 'text')
      .addColumn('description', 'text')
      .addColumn('vault_name', 'text')
      .addColumn('vault_type', 'text')
      .addColumn('provider', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('secret_references_project_name', ['project_id', 'name'])
      .execute();
    await db.schema
      .createIndex('secret_references_type')
      .on('secret_references')
      .columns(['project_id', 'type', 'name'])
      .execute();
  },
};
