import type { PortableMigration } from './types.ts';

/**
 * Consumption (issue 34): the rows a step's SQL wrote, where the agent's warehouse told it (PostgreSQL's
 * and DuckDB's counts of rows inserted, updated, deleted or merged); null where not known.
 */
export const stepRowsWritten: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('execution_steps').addColumn('rows_written', 'bigint').execute();
  },
};
