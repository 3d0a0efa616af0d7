import type { Generated } from 'kysely';

export interface ArtifactTable {
  id: Generated<number>;
  projectId: string;
  environmentId: string;
  versionName: string;
  branch: string | null;
  commitHash: string | null;
  /** How the version reached its environment: "upload" or "promotion". */
  provider: string;
  enabled: number;
  /** When the version was uploaded (kept by a promotion). */
  createdAt: string;
  /** When the version reached this environment (upload or promotion). */
  deployedAt: string;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion: Generated<number>;
}

export interface ArtifactAssetTable {
  artifactId: number;
  path: string;
  content: Buffer;
}

export interface ArtifactTables {
  artifacts: ArtifactTable;
  artifactAssets: ArtifactAssetTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ArtifactTables {}
}
