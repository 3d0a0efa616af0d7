export interface StreamingPipelineTable {
  id: string;
  projectId: string;
  agentId: string;
  name: string;
  /** JSON of advancedProperties, streamingSource and streamingTarget: secret references only, never values. */
  definition: string;
  /** STOPPED, STARTING, RUNNING, STOPPING or FAILED. */
  status: string;
  statusMessage: string | null;
  statusChangedAt: string;
  createdAt: string;
  /** JSON of the agent's last StreamingProgress report on the current run (src/contract/streaming.ts), or null. */
  progress: string | null;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion?: number;
}

export interface StreamingPipelineTables {
  streamingPipelines: StreamingPipelineTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends StreamingPipelineTables {}
}
