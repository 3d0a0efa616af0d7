import type { PortableMigration } from './types.ts';

/** A streaming pipeline runs as one piece of agent work, from its start until its stop. */
export const streamingPipelineRuns: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('streaming_pipelines').addColumn('work_id', 'text').execute();
  },
};
