import type { Generated } from 'kysely';

export interface StreamingPipelineTable {
  /** Creation order, also within one millisecond. */
  seq: Generated<number>;
  id: string;
  accountId: string;
  projectId: string;
  agentId: string;
  name: string;
  /** JSON of streamingSource, streamingTarget and advancedProperties. */
  definition: string;
  /** STOPPED, STARTING, RUNNING, STOPPING or FAILED. */
  status: string;
  /** The agent work that runs it, from its start until it is stopped or fails. */
  workId: string | null;
  statusMessage: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface StreamingPipelineTables {
  streamingPipelines: StreamingPipelineTable;
}
