import type { PortableMigration } from './types.ts';

/**
 * A running streaming pipeline's progress as its agent last reported it (JSON of the contract's
 * StreamingProgress: position, lag, rows per table), shown by its status.
 */
export const streamingProgress: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('streaming_pipelines').addColumn('progress', 'text').execute();
  },
};
