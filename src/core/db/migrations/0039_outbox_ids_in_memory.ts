import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * SQLite: an outbox event writes one b-tree page and no counter (issue 33: an event may add at most 10 % to
 * the change it announces; each page a group commit changes is copied to the log at its commit).
 * - `outbox_events` becomes WITHOUT ROWID, its rows kept in the order of its primary key (account, id): one
 *   b-tree where there were two (the rows by rowid, and the key's index).
 * - No foreign key to `accounts` (checked at each insert; accounts are never deleted; as on PostgreSQL since
 *   0038_outbox_lighter_writes).
 * - `outbox_counter` is no longer written with every group commit: the connection keeps the last id it
 *   handed out and finds it again from the table when another connection wrote to the file (db/group-commit.ts).
 *   The counter now holds a floor only, raised before events are deleted (pruneEvents), so that an id whose
 *   event was deleted is never handed out again.
 */
export const outboxIdsInMemory: PortableMigration = {
  async up(db, dialect) {
    if (dialect !== 'sqlite') return;
    await sql`create table outbox_events_new (
      account_id text not null,
      id integer not null,
      type text not null,
      project_id text,
      subject text not null,
      data text not null,
      occurred_at text not null,
      primary key (account_id, id)
    ) without rowid`.execute(db);
    await sql`insert into outbox_events_new (account_id, id, type, project_id, subject, data, occurred_at)
      select account_id, id, type, project_id, subject, data, occurred_at from outbox_events`.execute(db);
    await sql`drop table outbox_events`.execute(db);
    await sql`alter table outbox_events_new rename to outbox_events`.execute(db);
  },
};
