import type { PortableMigration } from './types.ts';

/**
 * The outbox: every change worth announcing, written in the transaction of the change (see core/outbox.ts).
 * Ids count per account from 1 without gaps: `event_sequences` holds each account's last id, and taking the
 * next one locks that row until the transaction ends, so an account's events commit in the order of their
 * ids and a reader that has seen id n has seen every id below it.
 */
export const outbox: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('event_sequences')
      .addColumn('account_id', 'text', (c) => c.primaryKey().references('accounts.id').onDelete('cascade'))
      .addColumn('last_id', 'bigint', (c) => c.notNull())
      .execute();
    await db.schema
      .createTable('outbox_events')
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('id', 'bigint', (c) => c.notNull())
      .addColumn('type', 'text', (c) => c.notNull())
      .addColumn('project_id', 'text')
      .addColumn('subject', 'text', (c) => c.notNull())
      .addColumn('data', 'text', (c) => c.notNull())
      .addColumn('occurred_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('outbox_events_pk', ['account_id', 'id'])
      .execute();
    await db.schema.createIndex('outbox_events_time').on('outbox_events').column('occurred_at').execute();
  },
};
