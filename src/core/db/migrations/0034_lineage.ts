import type { PortableMigration } from './types.ts';
import { serialKey } from './types.ts';

/**
 * Lineage (issue 34): an OpenLineage run event per step that reported the datasets it read and wrote,
 * in order of recording; it goes with its project.
 */
export const lineage: PortableMigration = {
  async up(db, dialect) {
    await db.schema
      .createTable('lineage_events')
      .addColumn('id', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('execution_id', 'text', (c) => c.notNull())
      .addColumn('generated_at', 'text', (c) => c.notNull())
      .addColumn('event', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('lineage_events_by_account_time')
      .on('lineage_events')
      .columns(['account_id', 'generated_at', 'id'])
      .execute();
    await db.schema.createIndex('lineage_events_by_execution').on('lineage_events').column('execution_id').execute();
  },
};
