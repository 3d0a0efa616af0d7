/**
 * What an agent reports of the data a step read and wrote (OpenLineage 1.x datasets), carried by a
 * progress report's `step.lineage`. The server builds the run events (`GET /v1/lineage/events`) from
 * it; the job, the run and the account are the server's, never the agent's word.
 */

/** A column of an output and the input columns it was made from (OpenLineage's columnLineage facet). */
export interface ColumnLineage {
  /** By output column. */
  [outputColumn: string]: { namespace: string; name: string; field: string }[];
}

/** A table or file, named as OpenLineage names datasets: `namespace` says where (`postgres://host:5432`), `name` what. */
export interface LineageDataset {
  namespace: string;
  /** `database.schema.table` for a warehouse table, the path for a file. */
  name: string;
  /** Columns, when known. */
  fields?: { name: string; type?: string }[];
  /** Outputs: the input columns each column came from, when known. */
  columnLineage?: ColumnLineage;
}

export interface StepLineage {
  inputs: LineageDataset[];
  outputs: LineageDataset[];
  /** The SQL the step ran, when it ran SQL (OpenLineage's sql job facet). */
  sql?: string;
}

/** Bounds on what one step may report; more is refused (the report names the field). */
export const LINEAGE_LIMITS = {
  datasets: 500,
  fields: 2000,
  text: 1024,
  sql: 100_000,
} as const;

/** The OpenLineage namespace of a warehouse: `<scheme>://<authority>`, e.g. `postgres://db.internal:5432`. */
export function warehouseNamespace(scheme: string, authority: string): string {
  return `${scheme}://${authority}`;
}
