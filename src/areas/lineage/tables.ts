import type { Generated } from 'kysely';

/** A step that reported datasets: its OpenLineage run event is built from this row and its body when read. */
export interface LineageStepTable {
  id: Generated<number>;
  accountId: string;
  projectId: string;
  executionId: string;
  /** When the server recorded the step (the window `generatedFrom`/`generatedBefore` reads). */
  generatedAt: string;
  /** The event's time: when the step finished, else when it was recorded. */
  eventTime: string;
  /** The pipeline's path, or the streaming pipeline's name (the job's name). */
  jobName: string;
  /**
   * RUN: a batch run's START or end (its event type in stepStatus; stepIndex the step that ran a child
   * pipeline, -1 for the execution's own run); STEP: a step's datasets (a RUNNING event; its status in
   * stepStatus); STREAMING: a streaming pipeline's run (its event type in stepStatus); PIPELINE: a step
   * recorded before migration 0046 (its event type read from its status).
   */
  jobKind: 'RUN' | 'STEP' | 'STREAMING' | 'PIPELINE';
  stepIndex: number;
  stepName: string;
  stepStatus: string;
  /** The body's hash: lineage_bodies (projectId, hash). */
  bodyHash: string;
  /** The OpenLineage run id: RUN rows always; other rows where it is not executionId (a child pipeline's run). */
  runId: string | null;
  /** A child run's parent and root, JSON ChildRunParent; null otherwise. */
  parent: string | null;
  /** RUN rows: START or END (one of each per run: the unique index of migration 0046); null otherwise. */
  runPhase: 'START' | 'END' | null;
}

/** The datasets a step read and wrote (StepLineage, JSON), once per project and content. */
export interface LineageBodyTable {
  projectId: string;
  /** sha256 of `body`, base64url. */
  hash: string;
  body: string;
}

/** How many steps an account recorded in a sealed UTC day (days.ts). */
export interface LineageDayTable {
  accountId: string;
  /** YYYY-MM-DD, UTC: the steps with `generatedAt` in [day, day + 1). */
  day: string;
  events: number;
}

export interface LineageTables {
  lineageSteps: LineageStepTable;
  lineageBodies: LineageBodyTable;
  lineageDays: LineageDayTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends LineageTables {}
}
