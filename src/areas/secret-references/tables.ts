export interface SecretReferenceTable {
  id: string;
  projectId: string;
  name: string;
  type: string;
  secretName: string;
  secretKey: string | null;
  description: string | null;
  vaultName: string | null;
  vaultType: string | null;
  provider: string | null;
  createdAt: string;
}

export interface SecretReferenceTables {
  secretReferences: SecretReferenceTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends SecretReferenceTables {}
}
