import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * Lineage (issue 34): every batch run is an OpenLineage run with a START and one end (COMPLETE, FAIL or
 * ABORT), and a child pipeline's run is a run of its own with a parent run facet, rather than a step event
 * under its parent's run id.
 * - `job_kind` 'RUN' rows are run-level events (`step_status` their event type, `run_phase` START or END;
 *   `step_index` the step that ran a child pipeline, -1 otherwise), 'STEP' rows a step's datasets (RUNNING
 *   events). Rows of kind 'PIPELINE' were written before this and are read as they were.
 * - `run_id`: the row's OpenLineage run id: on run-level rows always (the execution's id for its own run), on a
 *   step's row where it is not the execution's (a child pipeline's run: a UUID v5 in the execution id's namespace).
 * - `parent`: a child run's parent and root, JSON `{runId, job, rootJob}`; null otherwise.
 * - One START and one END per run: a unique index over the run-level rows alone (a partial index: a step's row
 *   only pays its predicate), which is also how a step names its child run (parentStep) and how a run's end
 *   finds the child runs it leaves open.
 */
export const lineageRuns: PortableMigration = {
  async up(db) {
    await sql`alter table lineage_steps add column run_id text`.execute(db);
    await sql`alter table lineage_steps add column parent text`.execute(db);
    await sql`alter table lineage_steps add column run_phase text`.execute(db);
    await sql`create unique index lineage_steps_run_events on lineage_steps (execution_id, run_id, run_phase) where job_kind = 'RUN'`.execute(
      db,
    );
  },
};
