import type { PortableMigration } from './types.ts';

/**
 * Whether an agent's being connected has been announced (an `agent.connected` event): set by its first
 * contact after being out of contact, cleared (with an `agent.disconnected` event) once its connected window
 * has passed without contact. A compare-and-set on it announces each change once across server processes.
 */
export const agentPresence: PortableMigration = {
  async up(db) {
    await db.schema
      .alterTable('agents')
      .addColumn('presence_announced', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
  },
};
