import type { PortableMigration } from './types.ts';

/**
 * How many lineage steps an account recorded in a UTC day, kept once the day is sealed (no step is recorded
 * into it any more): a 31-day page counts the window's rows from these rather than walking every one of them
 * (issue 34: a page in ≤ 100 ms at 220,000 events). Written by the reads that find a sealed day missing; a
 * project's deletion removes its account's days, which the next read counts again (src/areas/lineage/days.ts).
 */
export const lineageDays: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('lineage_days')
      .addColumn('account_id', 'text', (c) => c.notNull())
      .addColumn('day', 'text', (c) => c.notNull())
      .addColumn('events', 'bigint', (c) => c.notNull())
      .addPrimaryKeyConstraint('lineage_days_pk', ['account_id', 'day'])
      .execute();
  },
};
