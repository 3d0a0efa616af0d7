/**
 * What a pipeline run does to its environment's warehouse, whatever the warehouse is. An adapter (DuckDB,
 * PostgreSQL; Snowflake, Databricks or BigQuery would be more) implements this; the runner and the
 * transformation compiler never speak a driver. See docs/warehouses.md.
 */
import type { SqlDialect, TableName } from '../../contract/sql-dialect.ts';

export type Row = Record<string, unknown>;

export interface QueryResult {
  columns: string[];
  rows: Row[];
}

/** What running a script did, as far as the warehouse says. */
export interface RunResult {
  /**
   * Rows the script's INSERT, UPDATE, DELETE and MERGE statements (and, on PostgreSQL, CREATE TABLE AS
   * and SELECT INTO) wrote, summed; undefined when none of its statements is one whose count the
   * warehouse tells (DDL alone, or DuckDB's CREATE TABLE AS, which answers no count).
   */
  rowsWritten?: number;
}

export interface Column {
  name: string;
  type: string;
}

export interface Warehouse {
  readonly dialect: SqlDialect;
  /** What `[Environment Default]` means here. */
  readonly defaultDatabase?: string;
  readonly defaultSchema: string;
  /** Where its tables are, as OpenLineage names a warehouse (`postgres://host:5432`): the namespace of lineage datasets. */
  readonly lineageNamespace: string;
  /** The grammar its SQL is read with for lineage (node-sql-parser's, src/contract/sql-grammar.ts). */
  readonly sqlGrammar: string;
  /**
   * Runs one or more statements (a script separated by `;`). `signal` cancels them in the warehouse
   * (the adapter interrupts or cancels the statement in flight; the promise rejects).
   */
  run(sql: string, signal: AbortSignal): Promise<RunResult>;
  /** Runs one query and answers its rows; numbers beyond a double's precision come back as strings. */
  query(sql: string, signal: AbortSignal): Promise<QueryResult>;
  quoteIdentifier(name: string): string;
  quoteLiteral(value: unknown): string;
  /** The columns of a table, in order; an error when the table does not exist. */
  listColumns(table: TableName, signal: AbortSignal): Promise<Column[]>;
  /** Cancels every statement in flight. */
  cancel(): Promise<void>;
  /** Releases connections (statements in flight are cancelled first). */
  close(): Promise<void>;
}

/**
 * An error the warehouse reported, carried without the driver's stack: its message is what the failed
 * step shows.
 */
export class WarehouseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WarehouseError';
  }
}

/** Rows of `values` (one array a row, in `columns` order) as objects without a prototype, values made plain. */
export function rowsOf(columns: string[], values: readonly (readonly unknown[])[]): Row[] {
  return values.map((row) => {
    const named = Object.create(null) as Row;
    columns.forEach((column, index) => (named[column] = plainValue(row[index])));
    return named;
  });
}

/** A value as a run's variables hold it: bigints as numbers when exact, else text; dates as ISO text. */
export function plainValue(value: unknown): unknown {
  if (typeof value === 'bigint') {
    return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER)
      ? Number(value)
      : value.toString();
  }
  if (value instanceof Date) return value.toISOString();
  return value;
}
