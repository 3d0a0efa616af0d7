import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * A step recorded into a day before the store's today (its writer's clock behind, or a commit long after its
 * time) forgets that day's kept count (lineage_days, migration 0048), which the next read counts again: a kept
 * count never misses a step, so a page's position in the window stays exact (attack finding F2 of attack 6).
 * The store's clock decides, the one reads seal days by. On PostgreSQL such a write first takes the account's
 * lineage-days lock alone (class 34 of the two-key advisory locks, hashtext of the account), so it waits for a
 * read keeping days to commit, and a read waits for it; SQLite has one writer. A step of today does nothing
 * but the comparison.
 */
export const lineageDaysLateSteps: PortableMigration = {
  async up(db, dialect) {
    if (dialect === 'postgres') {
      await sql`
        create function lineage_days_late_step() returns trigger language plpgsql as $$
        begin
          if new.generated_at < to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD') then
            perform pg_advisory_xact_lock(34, hashtext(new.account_id));
            delete from lineage_days where account_id = new.account_id and day = substr(new.generated_at, 1, 10);
          end if;
          return null;
        end
        $$`.execute(db);
      await sql`
        create trigger lineage_days_late_step after insert on lineage_steps
        for each row execute function lineage_days_late_step()`.execute(db);
    } else {
      await sql`
        create trigger lineage_days_late_step after insert on lineage_steps
        when new.generated_at < strftime('%Y-%m-%d', 'now')
        begin
          delete from lineage_days where account_id = new.account_id and day = substr(new.generated_at, 1, 10);
        end`.execute(db);
    }
  },
};
