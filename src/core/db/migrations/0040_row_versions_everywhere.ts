import type { PortableMigration } from './types.ts';

/**
 * A version per row of every resource that a PUT, PATCH or DELETE changes (webhooks and schedules have had one
 * since 0038_row_versions): a write with If-Match compares it in the write itself (core/conditional.ts), which
 * replaces the store-held lock of 0033_conditional_locks, dropped here. Every UPDATE of these rows moves it on.
 */
export const rowVersionsEverywhere: PortableMigration = {
  async up(db) {
    for (const table of [
      'projects',
      'agents',
      'connections',
      'connection_overrides',
      'custom_connectors',
      'oauth_connections',
      'project_repositories',
      'streaming_pipelines',
      'executions',
      'artifacts',
    ]) {
      await db.schema
        .alterTable(table)
        .addColumn('row_version', 'integer', (column) => column.notNull().defaultTo(0))
        .execute();
    }
    await db.schema.dropTable('conditional_write_locks').execute();
  },
};
