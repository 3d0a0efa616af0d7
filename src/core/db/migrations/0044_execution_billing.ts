import type { PortableMigration } from './types.ts';

/**
 * Consumption (issue 34) prices a run as it ran, and from when its agent began it:
 * - `agent_type`: the type of the run's agent when the run was started (a run is priced by it; the agent may be
 *   deleted or change type later). Null on runs started before this column: priced by the agent as it is now.
 * - `first_report_at`: when the server took the first report of the run's agent (its clock, not the agent's).
 *   A run's run-seconds count from it; a run the agent never reported on (cancelled while queued) ran nothing.
 */
export const executionBilling: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('executions').addColumn('agent_type', 'text').execute();
    await db.schema.alterTable('executions').addColumn('first_report_at', 'text').execute();
  },
};
