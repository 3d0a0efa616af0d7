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
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion?: number;
}

export interface ConnectionOverrideTable {
  connectionId: string;
  environmentId: string;
  connectionDetails: string;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion?: number;
}

export interface ConnectionTables {
  connections: ConnectionTable;
  connectionOverrides: ConnectionOverrideTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ConnectionTables {}
}
