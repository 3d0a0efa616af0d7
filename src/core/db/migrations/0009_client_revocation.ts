import type { PortableMigration } from './types.ts';

/** A revoked API client keeps its row (for the audit trail and `dpc clients list`) but gets no token. */
export const clientRevocation: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('api_clients').addColumn('revoked_at', 'text').execute();
  },
};
