import type { PortableMigration } from './types.ts';

/**
 * An agent retries a report until its lease ends, so the same report may arrive twice (the first answer was
 * lost). Reports carry their delivery and a sequence number within it; the highest sequence recorded for the
 * current delivery is kept, and a report at or below it is answered without being applied again.
 */
export const agentReportSequence: PortableMigration = {
  async up(db) {
    await db.schema
      .alterTable('agent_work')
      .addColumn('report_sequence', 'integer', (c) => c.notNull().defaultTo(0))
      .execute();
  },
};
