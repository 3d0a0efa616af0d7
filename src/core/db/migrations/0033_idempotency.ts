import type { PortableMigration } from './types.ts';

/**
 * Idempotency keys (core/idempotency.ts): per API client and key, a fingerprint of the request and, once
 * answered, the answer, kept 24 hours. A row `running` is the request in progress (until `locked_until`).
 */
export const idempotency: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('idempotency_keys')
      .addColumn('client_id', 'text', (c) => c.notNull())
      .addColumn('key', 'text', (c) => c.notNull())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('fingerprint', 'text', (c) => c.notNull())
      .addColumn('state', 'text', (c) => c.notNull())
      .addColumn('status', 'integer')
      .addColumn('headers', 'text')
      .addColumn('body', 'text')
      .addColumn('locked_until', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('expires_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('idempotency_keys_pk', ['client_id', 'key'])
      .execute();
    await db.schema.createIndex('idempotency_keys_expiry').on('idempotency_keys').column('expires_at').execute();
  },
};
