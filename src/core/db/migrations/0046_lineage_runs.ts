import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * Lineage (issue 34): every batch run is an OpenLineage run with a START and one end (COMPLETE, FAIL or
 * ABORT), and a child pipeline's run is a run of its own with a parent run facet, rather than a step event
 * under its parent's run id.
 * - `run_id`: the row's OpenLineage run id where it is not the execution's (a child pipeline's run: a
 *   UUID v5 in the execution id's namespace); null for the execution's own run.
 * - `parent`: a child run's parent and root, JSON `{runId, job, rootJob}`; null otherwise.
 * - `job_kind` 'RUN' rows are run-level events (`step_status` their event type; `step_index` the step that
 *   ran a child pipeline, -1 for the execution's own run), 'STEP' rows a step's datasets (RUNNING events).
 *   Rows of kind 'PIPELINE' were written before this and are read as they were.
 * - A run's START and its end are recorded once: a unique index over the run-level rows alone (a partial
 *   index: a step's row only pays the predicate), which is also how a run's end finds the child runs it
 *   leaves open.
 */
export const lineageRuns: PortableMigration = {
  async up(db) {
    await sql`alter table lineage_steps add column run_id text`.execute(db);
    await sql`alter table lineage_steps add column parent text`.execute(db);
    await sql`create unique index lineage_steps_run_events on lineage_steps (execution_id, job_name, step_index, step_status) where job_kind = 'RUN'`.execute(
      db,
    );
  },
};
