import type { PortableMigration } from './types.ts';

/**
 * Jobs of one group run one at a time (core/jobs.ts): a webhook's deliveries, now that deliveries run
 * concurrently (attack 3 A18). Jobs queued before have no group.
 */
export const jobGroups: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('jobs').addColumn('group_key', 'text').execute();
    await db.schema.createIndex('jobs_group_running').on('jobs').columns(['group_key', 'state']).execute();
  },
};
