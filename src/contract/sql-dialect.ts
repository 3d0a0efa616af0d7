/**
 * How each warehouse spells identifiers and literals: the one place that quotes. The transformation
 * compiler writes SQL with these, and each agent warehouse adapter names its dialect. Pure: no I/O.
 * A dialect for another warehouse (Snowflake, Databricks, BigQuery) is one more entry; see docs/warehouses.md.
 */

export interface SqlDialect {
  name: string;
  /** A name as the warehouse reads it exactly: `select` or `o'brien` are columns like any other. */
  quoteIdentifier(name: string): string;
  /** A string, number, boolean or null as a SQL literal. */
  quoteLiteral(value: unknown): string;
  /** The type names the compiler's convert-type uses, by the platform's names (VARCHAR, NUMBER, ...). */
  typeName(type: string, size?: number, precision?: number): string;
  /** Whether `CREATE OR REPLACE TABLE` exists (else: drop, then create). */
  createOrReplace: boolean;
  /** Whether a table name may name a database (PostgreSQL connects to one database and may not). */
  namesDatabase: boolean;
}

/** A SQL string literal with single quotes doubled; a NUL cannot be in a SQL text at all. */
function quoteString(text: string): string {
  if (text.includes('\u0000')) throw new Error('A text value cannot contain the NUL character.');
  return `'${text.replace(/'/g, "''")}'`;
}

function standardLiteral(value: unknown): string {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`${value} is not a number a warehouse can hold.`);
    return String(value);
  }
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
  return quoteString(String(value));
}

/** Double quotes, an embedded one doubled (SQL standard; PostgreSQL and DuckDB). */
function standardIdentifier(name: string): string {
  if (name.length === 0) throw new Error('An identifier cannot be empty.');
  if (name.includes('\u0000')) throw new Error('An identifier cannot contain the NUL character.');
  return `"${name.replace(/"/g, '""')}"`;
}

const STANDARD_TYPES: Record<string, (size?: number, precision?: number) => string> = {
  VARCHAR: (size) => (size ? `VARCHAR(${size})` : 'VARCHAR'),
  TEXT: () => 'VARCHAR',
  STRING: () => 'VARCHAR',
  NUMBER: (size, precision) => (size ? `NUMERIC(${size}, ${precision ?? 0})` : 'NUMERIC'),
  NUMERIC: (size, precision) => (size ? `NUMERIC(${size}, ${precision ?? 0})` : 'NUMERIC'),
  DECIMAL: (size, precision) => (size ? `NUMERIC(${size}, ${precision ?? 0})` : 'NUMERIC'),
  INTEGER: () => 'INTEGER',
  BIGINT: () => 'BIGINT',
  FLOAT: () => 'DOUBLE PRECISION',
  DOUBLE: () => 'DOUBLE PRECISION',
  BOOLEAN: () => 'BOOLEAN',
  DATE: () => 'DATE',
  TIMESTAMP: () => 'TIMESTAMP',
  TIME: () => 'TIME',
};

function standardType(type: string, size?: number, precision?: number): string {
  const make = STANDARD_TYPES[type.trim().toUpperCase()];
  if (!make) throw new Error(`Type "${type}" is not one of ${Object.keys(STANDARD_TYPES).join(', ')}.`);
  return make(size, precision);
}

export const POSTGRES_DIALECT: SqlDialect = {
  name: 'postgres',
  quoteIdentifier: standardIdentifier,
  quoteLiteral: standardLiteral,
  typeName: standardType,
  createOrReplace: false,
  namesDatabase: false,
};

export const DUCKDB_DIALECT: SqlDialect = {
  name: 'duckdb',
  quoteIdentifier: standardIdentifier,
  quoteLiteral: standardLiteral,
  typeName: (type, size, precision) => standardType(type, size, precision).replace('DOUBLE PRECISION', 'DOUBLE'),
  createOrReplace: true,
  namesDatabase: true,
};

export const SQL_DIALECTS: Record<string, SqlDialect> = { postgres: POSTGRES_DIALECT, duckdb: DUCKDB_DIALECT };

/** A table's place in the warehouse; database and schema may be left to the connection's defaults. */
export interface TableName {
  database?: string;
  schema?: string;
  table: string;
}

/** `"db"."schema"."table"`, leaving out the parts not given. */
export function qualifiedName(dialect: SqlDialect, name: TableName): string {
  return [dialect.namesDatabase ? name.database : undefined, name.schema, name.table]
    .filter((part): part is string => part !== undefined && part !== '')
    .map((part) => dialect.quoteIdentifier(part))
    .join('.');
}
