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
  /** PIPELINE: a step of a run (its status in stepStatus); STREAMING: a streaming pipeline's run (its event type in stepStatus). */
  jobKind: 'PIPELINE' | 'STREAMING';
  stepIndex: number;
  stepName: string;
  stepStatus: string;
  /** The body's hash: lineage_bodies (projectId, hash). */
  bodyHash: string;
}

/** The datasets a step read and wrote (StepLineage, JSON), once per project and content. */
export interface LineageBodyTable {
  projectId: string;
  /** sha256 of `body`, base64url. */
  hash: string;
  body: string;
}

export interface LineageTables {
  lineageSteps: LineageStepTable;
  lineageBodies: LineageBodyTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends LineageTables {}
}
