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
  status: string;
  statusMessage: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface StreamingPipelineTables {
  streamingPipelines: StreamingPipelineTable;
}
