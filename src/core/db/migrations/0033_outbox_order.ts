import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * Outbox ids without a lock per account (core/outbox.ts). Ids are global and only grow; they are no longer
 * counted per account, so `event_sequences` goes. On SQLite one counter (`outbox_counter`) hands them out at
 * each group commit, under the write lock; it starts past every id handed out so far. On PostgreSQL an id is
 * the writing transaction's id × 4096 + the event's place in it, past every id counted per account before.
 */
export const outboxOrder: PortableMigration = {
  async up(db, dialect) {
    if (dialect === 'sqlite') {
      await db.schema
        .createTable('outbox_counter')
        .addColumn('id', 'integer', (c) => c.primaryKey().check(sql`id = 1`))
        .addColumn('last_id', 'bigint', (c) => c.notNull())
        .execute();
      await sql`insert into outbox_counter (id, last_id)
        select 1, max(coalesce((select max(id) from outbox_events), 0), coalesce((select max(last_id) from event_sequences), 0))`.execute(
        db,
      );
    }
    await db.schema.dropTable('event_sequences').execute();
  },
};
