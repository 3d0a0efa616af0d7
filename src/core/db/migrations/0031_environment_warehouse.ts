import type { PortableMigration } from './types.ts';

/**
 * Issue 31: an environment names the warehouse its pipelines run on (JSON: type, where to connect, the
 * project connection whose vault secret holds the password, the default database and schema). Null: the
 * agent's embedded DuckDB database. Never a secret value.
 */
export const environmentWarehouse: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('environments').addColumn('warehouse', 'text').execute();
  },
};
