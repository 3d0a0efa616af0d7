export interface EnvironmentTable {
  id: string;
  projectId: string;
  name: string;
  description: string | null;
  defaultAgentId: string | null;
  /** The environment's warehouse as JSON (WarehouseSettings); null: the agent's embedded DuckDB. */
  warehouse: string | null;
  createdAt: string;
}

export interface EnvironmentTables {
  environments: EnvironmentTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends EnvironmentTables {}
}
