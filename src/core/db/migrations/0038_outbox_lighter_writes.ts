import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * Less written with each outbox event (issue 33: an event may add at most 10 % to the change it announces):
 * - no index on `occurred_at`: retention finds old events through the primary key (ids grow with time within
 *   an account, see pruneEvents), so an event is one b-tree fewer to write;
 * - on PostgreSQL, no foreign key to `accounts`: its check locked the account's row (FOR KEY SHARE) in every
 *   transaction that wrote an event, and concurrent writers of one account shared that lock through a
 *   multixact. Accounts are never deleted; events of one that were would go with retention.
 */
export const outboxLighterWrites: PortableMigration = {
  async up(db, dialect) {
    await db.schema.dropIndex('outbox_events_time').ifExists().execute();
    if (dialect === 'postgres') {
      await sql`alter table outbox_events drop constraint if exists outbox_events_account_id_fkey`.execute(db);
    }
  },
};
