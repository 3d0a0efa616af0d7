import type { PortableMigration } from './types.ts';

/**
 * Webhooks: where an account's events are sent, signed with a secret kept sealed, and one delivery per
 * webhook and event (unique), retried on its own schedule. `cursor` is the last outbox event id the
 * webhook's deliveries were made for: fan-out moves it forward with a compare-and-set, so several server
 * processes never make a delivery twice.
 */
export const webhooks: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('webhooks')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('url', 'text', (c) => c.notNull())
      .addColumn('description', 'text')
      .addColumn('event_types', 'text', (c) => c.notNull())
      .addColumn('project_id', 'text')
      .addColumn('enabled', 'integer', (c) => c.notNull())
      .addColumn('disabled_reason', 'text')
      .addColumn('sealed_secret', 'text', (c) => c.notNull())
      .addColumn('cursor', 'bigint', (c) => c.notNull())
      .addColumn('consecutive_failures', 'integer', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('webhooks_account').on('webhooks').columns(['account_id', 'created_at']).execute();

    await db.schema
      .createTable('webhook_deliveries')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('webhook_id', 'text', (c) => c.notNull().references('webhooks.id').onDelete('cascade'))
      .addColumn('account_id', 'text', (c) => c.notNull())
      .addColumn('event_id', 'bigint', (c) => c.notNull())
      .addColumn('event_type', 'text', (c) => c.notNull())
      .addColumn('body', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('attempts', 'integer', (c) => c.notNull())
      .addColumn('next_attempt_at', 'text')
      .addColumn('last_attempt_at', 'text')
      .addColumn('last_status_code', 'integer')
      .addColumn('last_response', 'text')
      .addColumn('last_error', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('webhook_deliveries_once', ['webhook_id', 'event_id'])
      .execute();
    await db.schema
      .createIndex('webhook_deliveries_time')
      .on('webhook_deliveries')
      .columns(['webhook_id', 'created_at'])
      .execute();
  },
};
