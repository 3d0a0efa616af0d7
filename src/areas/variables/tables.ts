export interface ProjectVariableTable {
  id: string;
  projectId: string;
  name: string;
  type: string;
  behaviour: string;
  description: string | null;
  /** The default value as JSON text (a string or a number), null when there is none. */
  value: string | null;
  supportsDoubleResolution: number;
  createdAt: string;
}

export interface ProjectVariableCountTable {
  projectId: string;
  total: number;
}

export interface VariableOverrideTable {
  variableId: string;
  environmentId: string;
  /** JSON text, as ProjectVariableTable.value. */
  value: string;
}

export interface VariableTables {
  projectVariables: ProjectVariableTable;
  projectVariableCounts: ProjectVariableCountTable;
  variableOverrides: VariableOverrideTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends VariableTables {}
}
