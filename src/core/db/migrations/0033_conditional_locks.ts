import type { PortableMigration } from './types.ts';

/**
 * Conditional writes (core/conditional.ts): a row per resource URL (of an account) that a write with If-Match
 * holds from its check to its answer, in whichever server process it runs, until `locked_until` at most.
 */
export const conditionalLocks: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('conditional_write_locks')
      .addColumn('key', 'text', (c) => c.primaryKey())
      .addColumn('holder', 'text', (c) => c.notNull())
      .addColumn('locked_until', 'text', (c) => c.notNull())
      .execute();
  },
};
