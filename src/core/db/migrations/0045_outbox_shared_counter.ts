import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * SQLite: once more than one connection has written to the file (several server processes, the CLI),
 * `outbox_counter.shared` is set, and from then on every connection writes the last outbox id it handed out
 * into `outbox_counter.last_id` with each commit of events. A connection that finds another one committed
 * since its last commit then reads that one row, not the last event of every account (one seek per account:
 * 45 ms under the write lock at 100,000 accounts, attack finding F8). A file only one connection writes to
 * keeps the counter out of its commits (db/group-commit.ts).
 */
export const outboxSharedCounter: PortableMigration = {
  async up(db, dialect) {
    if (dialect !== 'sqlite') return;
    await sql`alter table outbox_counter add column shared integer not null default 0`.execute(db);
  },
};
