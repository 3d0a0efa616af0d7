export interface ProjectTable {
  id: string;
  accountId: string;
  name: string;
  description: string | null;
  createdBy: string;
  createdAt: string;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion?: number;
}

export interface ProjectTables {
  projects: ProjectTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ProjectTables {}
}
