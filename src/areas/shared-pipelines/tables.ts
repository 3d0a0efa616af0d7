import type { Generated } from 'kysely';

export interface SharedPipelineArtifactTable {
  id: Generated<number>;
  accountId: string;
  sharedPipelineIdPrefix: string;
  versionName: string;
  branch: string | null;
  commitHash: string | null;
  provider: string;
  enabled: number;
  createdAt: string;
}

export interface SharedPipelineTable {
  artifactId: number;
  sharedPipelineId: string;
  sourcePipeline: string;
  description: string;
  content: Buffer;
}

export interface SharedPipelineTables {
  sharedPipelineArtifacts: SharedPipelineArtifactTable;
  sharedPipelines: SharedPipelineTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends SharedPipelineTables {}
}
