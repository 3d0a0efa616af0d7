export interface ConnectionTable {
  id: string;
  projectId: string;
  name: string;
  authProvider: string;
  authType: string;
  platformConnectionType: string;
  /** ConnectionDetails as JSON text: secret references only, never a secret value. */
  connectionDetails: string | null;
  createdBy: string;
  createdAt: string;
}

export interface ConnectionOverrideTable {
  connectionId: string;
  environmentId: string;
  connectionDetails: string;
}

export interface ConnectionTables {
  connections: ConnectionTable;
  connectionOverrides: ConnectionOverrideTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ConnectionTables {}
}
