export interface ProjectTable {
  id: string;
  accountId: string;
  name: string;
  description: string | null;
  createdBy: string;
  createdAt: string;
}

export interface ProjectTables {
  projects: ProjectTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ProjectTables {}
}
