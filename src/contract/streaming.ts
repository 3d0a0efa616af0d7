/**
 * What the server and an agent agree on about a streaming pipeline's run: the payload of its work, and the
 * progress the agent reports while the run lasts. The start work is held by the agent for as long as the
 * pipeline runs: its progress reports (StreamingProgress) keep the lease alive and carry the status the
 * server shows; its final report ends the run (done: StreamingRunEnd; failed: the reason). A run whose agent
 * vanished is delivered again once its lease lapses, and the agent resumes it from its stored position.
 */

/** A secret reference inside a definition: the specification's form or the vendor's ({secretType, secretName, key}). */
export interface StreamingSecretReference {
  secretName: string;
  secretKey?: string;
  key?: string;
  secretType?: string;
  secretLocation?: string;
}

/** The definition as the server stores it: secret references only, never a value. */
export interface StreamingDefinition {
  advancedProperties: Record<string, string>;
  streamingSource: unknown;
  streamingTarget: unknown;
}

/** streaming-pipeline-start, streaming-pipeline-stop and streaming-pipeline-drop-slot. */
export interface StreamingPipelinePayload {
  streamingPipelineId: string;
  projectId?: string;
  /** The account the pipeline belongs to: a warehouse target writes to that account's warehouse. */
  accountId?: string;
  name?: string;
  definition: StreamingDefinition;
  /**
   * A stop's: the run it ends (the id of the start work, which the stop cancels), so that the server can
   * close the run's lineage once the agent reports the stop. Agents need not read it.
   */
  runId?: string;
}

/** The advanced property that chooses whether a first start copies the tables' rows first. */
export const SNAPSHOT_MODE_PROPERTY = 'snapshot.mode';
export const SNAPSHOT_MODES = ['initial', 'never'] as const;
export type SnapshotMode = (typeof SNAPSHOT_MODES)[number];
/** A first start copies the tables' current rows unless told `never`. */
export const DEFAULT_SNAPSHOT_MODE: SnapshotMode = 'initial';

/** Source types the reference agent moves data from; the others are accepted definitions whose start fails. */
export const SUPPORTED_STREAMING_SOURCES = ['postgres', 'mysql'] as const;

/** A progress report on a running streaming pipeline (the body of a `progress` report on its start work). */
export interface StreamingProgress {
  /** STARTING while the agent connects and prepares the source; RUNNING once changes flow (the snapshot included). */
  state: 'STARTING' | 'RUNNING';
  /** snapshot: copying the tables' rows; streaming: reading the change stream. */
  phase: 'snapshot' | 'streaming';
  /** The last source position written to the target and committed (a PostgreSQL LSN such as 0/16B3748), or null before any. */
  position: string | null;
  /** Seconds between the source's commit of the newest change written and its write; 0 when caught up. */
  lagSeconds: number;
  /** Rows written to the target since the pipeline's first start, by `schema.table` (snapshot rows and changes). */
  rowsPerTable: Record<string, number>;
  /** When the agent made the report (ISO 8601). */
  reportedAt: string;
}

/** The body of the `done` report that ends a run (it was stopped). */
export interface StreamingRunEnd {
  state: 'STOPPED';
  position: string | null;
  rowsPerTable: Record<string, number>;
}

/** The body of the `done` report of a drop-slot work. */
export interface StreamingSlotDropped {
  slot: string;
  dropped: boolean;
  publication: string;
}

/** Whether a report body is a StreamingProgress (the server keeps only what fits). */
export function isStreamingProgress(body: unknown): body is StreamingProgress {
  const value = body as Partial<StreamingProgress> | null;
  return (
    typeof value === 'object' &&
    value !== null &&
    (value.state === 'STARTING' || value.state === 'RUNNING') &&
    (value.position === null || typeof value.position === 'string') &&
    typeof value.lagSeconds === 'number' &&
    typeof value.rowsPerTable === 'object' &&
    value.rowsPerTable !== null
  );
}
