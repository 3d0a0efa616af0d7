import type { PortableMigration } from './types.ts';

/**
 * A version per row of the resources whose conditional writes (If-Match) compare it in the write itself: every
 * change through the API adds one, and a write with If-Match changes the row only where it is still the
 * version its check saw (core/conditional.ts).
 */
export const rowVersions: PortableMigration = {
  async up(db) {
    for (const table of ['webhooks', 'schedules']) {
      await db.schema
        .alterTable(table)
        .addColumn('row_version', 'integer', (column) => column.notNull().defaultTo(0))
        .execute();
    }
  },
};
