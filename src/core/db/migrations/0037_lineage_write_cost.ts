import type { PortableMigration } from './types.ts';

/**
 * Lineage (issue 34): the index of events by execution had no reader, and every step's event paid for it
 * (one more index page written per report; bench/lineage.ts). The window's index (account, time, id)
 * serves the only query.
 */
export const lineageWriteCost: PortableMigration = {
  async up(db) {
    await db.schema.dropIndex('lineage_events_by_execution').ifExists().execute();
  },
};
