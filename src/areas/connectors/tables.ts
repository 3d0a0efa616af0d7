export interface CustomConnectorTable {
  id: string;
  accountId: string;
  name: string;
  /** JSON of the profile's icon, logo and endpoints. */
  document: string;
  /** 0/1: a deleted profile is kept, marked, and hidden from the list unless asked for. */
  deleted: number;
  deletedTime: string | null;
  lastModified: string;
  createdAt: string;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion?: number;
}

export interface ConnectorTables {
  customConnectors: CustomConnectorTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ConnectorTables {}
}
