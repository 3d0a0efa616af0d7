import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * A run's step that runs a child pipeline keeps which (`runs_pipeline`, the first the agent reported for it):
 * a step of that child names it (parentStep), and the executions area checks the name against this row, the
 * run's own record, whether or not lineage is recorded (DPC_LINEAGE).
 */
export const stepRunsPipeline: PortableMigration = {
  async up(db) {
    await sql`alter table execution_steps add column runs_pipeline text`.execute(db);
  },
};
