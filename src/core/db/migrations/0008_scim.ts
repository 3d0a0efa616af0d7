import type { PortableMigration } from './types.ts';

/** Directory-integration tokens and the SCIM users, groups, memberships and searchable values of each account. */
export const scim: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('directory_tokens')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('secret_hash', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('revoked_at', 'text')
      .execute();
    await db.schema
      .createIndex('directory_tokens_account')
      .on('directory_tokens')
      .columns(['account_id', 'created_at'])
      .execute();

    await db.schema
      .createTable('scim_users')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('user_name', 'text', (c) => c.notNull())
      .addColumn('user_name_key', 'text', (c) => c.notNull())
      .addColumn('display_name', 'text')
      .addColumn('document', 'text', (c) => c.notNull())
      .addColumn('password_hash', 'text')
      .addColumn('version', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('last_modified', 'text', (c) => c.notNull())
      .addUniqueConstraint('scim_users_account_user_name', ['account_id', 'user_name_key'])
      .execute();

    await db.schema
      .createTable('scim_groups')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('display_name', 'text', (c) => c.notNull())
      .addColumn('document', 'text', (c) => c.notNull())
      .addColumn('project_id', 'text')
      .addColumn('role', 'text')
      .addColumn('version', 'integer', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('last_modified', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('scim_groups_account').on('scim_groups').columns(['account_id', 'created_at']).execute();

    await db.schema
      .createTable('scim_group_members')
      .addColumn('group_id', 'text', (c) => c.notNull().references('scim_groups.id').onDelete('cascade'))
      .addColumn('user_id', 'text', (c) => c.notNull().references('scim_users.id').onDelete('cascade'))
      .addPrimaryKeyConstraint('scim_group_members_key', ['group_id', 'user_id'])
      .execute();
    // A user's groups, and the cascade of a user's delete, look memberships up by user.
    await db.schema.createIndex('scim_group_members_user').on('scim_group_members').column('user_id').execute();

    await db.schema
      .createTable('scim_values')
      .addColumn('resource_id', 'text', (c) => c.notNull())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('resource_type', 'text', (c) => c.notNull())
      .addColumn('attribute', 'text', (c) => c.notNull())
      .addColumn('element', 'integer', (c) => c.notNull())
      .addColumn('value', 'text', (c) => c.notNull())
      .execute();
    // Filters look values up by attribute and value within an account; rewrites replace a resource's rows.
    await db.schema
      .createIndex('scim_values_lookup')
      .on('scim_values')
      .columns(['account_id', 'resource_type', 'attribute', 'value'])
      .execute();
    await db.schema.createIndex('scim_values_resource').on('scim_values').columns(['resource_id', 'attribute']).execute();
  },
};
