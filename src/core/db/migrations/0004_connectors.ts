import type { PortableMigration } from './types.ts';
import { serialKey } from './types.ts';

export const connectors: PortableMigration = {
  async up(db, dialect) {
    await db.schema
      .createTable('custom_connectors')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('document', 'text', (c) => c.notNull())
      .addColumn('deleted', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('deleted_time', 'text')
      .addColumn('last_modified', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('custom_connectors_account_name')
      .on('custom_connectors')
      .columns(['account_id', 'name'])
      .execute();

    await db.schema
      .createTable('oauth_connections')
      .addColumn('seq', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('grant_type', 'text', (c) => c.notNull())
      .addColumn('client_id', 'text', (c) => c.notNull())
      .addColumn('client_secret', 'text', (c) => c.notNull())
      .addColumn('authorization_url', 'text')
      .addColumn('token_url', 'text', (c) => c.notNull())
      .addColumn('scopes', 'text', (c) => c.notNull())
      .addColumn('tokens', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('oauth_connections_account_name', ['account_id', 'name'])
      .execute();
  },
};
