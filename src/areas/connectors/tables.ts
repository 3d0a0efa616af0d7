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
}

export interface ConnectorTables {
  customConnectors: CustomConnectorTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ConnectorTables {}
}
