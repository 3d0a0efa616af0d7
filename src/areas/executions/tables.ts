import type { Generated } from 'kysely';
export interface ExecutionTable {
  id: string;
  accountId: string;
  projectId: string;
  environmentId: string;
  /** Kept beside the id so that the history still reads after a rename or delete elsewhere. */
  environmentName: string;
  /** PIPELINE or TEST. */
  kind: string;
  /** The pipeline file run; null for a test execution of scope PROJECT. */
  pipelineName: string | null;
  /** Test executions: TEST, PIPELINE or PROJECT, and the test named by a TEST scope. */
  testScope: string | null;
  testName: string | null;
  versionName: string;
  agentId: string;
  /** The agent work carrying the run (agents area). */
  agentWorkId: string | null;
  executionTag: string | null;
  /** The executionTag while the run is not finished, null after: a unique key makes a second running tag a 409. */
  runningTag: string | null;
  /** MANUAL or SCHEDULE. */
  trigger: string;
  scheduleId: string | null;
  /** The due time a scheduled run is for: unique per schedule, so a due time starts one run whatever races. */
  scheduledFor: string | null;
  status: string;
  message: string | null;
  /** JSON: the variables the run was started with, resolved (request > environment override > project default). */
  variables: string;
  startedAt: string;
  finishedAt: string | null;
  /** Last report from the agent on this run. */
  lastReportAt: string | null;
  /** The first report the server took from the agent on this run (server time): run-seconds count from it. */
  firstReportAt: string | null;
  /** The run's agent's type when the run was started: what the run is priced by (null on runs from before it was kept). */
  agentType: string | null;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion: Generated<number>;
}

export interface ExecutionStepTable {
  executionId: string;
  /** The step's position in the run, as the agent numbers it: a repeated report updates the step. */
  position: number;
  name: string;
  status: string;
  startedAt: string;
  finishedAt: string | null;
  message: string | null;
  childPipeline: string | null;
  /** The child pipeline the step runs (run-orchestration, run-transformation): the first the agent reported for it. */
  runsPipeline: string | null;
  /** Rows the step's SQL wrote, as the agent's warehouse told it; null where not known. */
  rowsWritten: number | null;
}

export interface ExecutionTables {
  executions: ExecutionTable;
  executionSteps: ExecutionStepTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ExecutionTables {}
}
