/**
 * Which grammar SQL written for a warehouse is read with: node-sql-parser's `database` option, per
 * warehouse type an environment may declare (`warehouse.type`). Used where SQL is read without being run:
 * the review's "SQL that does not parse for the warehouse" (server) and the tables a script reads and
 * writes for lineage (agent). Pure.
 */

/** The warehouse types an environment may declare; agents run duckdb and postgres (docs/warehouses.md). */
export const WAREHOUSE_TYPES = [
  'duckdb',
  'postgres',
  'snowflake',
  'bigquery',
  'redshift',
  'mysql',
  'mariadb',
  'sqlserver',
] as const;
export type WarehouseType = (typeof WAREHOUSE_TYPES)[number];

/** node-sql-parser's grammar for each type: DuckDB reads what PostgreSQL does (it has no grammar of its own there). */
export const SQL_GRAMMARS: Readonly<Record<WarehouseType, string>> = {
  duckdb: 'postgresql',
  postgres: 'postgresql',
  snowflake: 'snowflake',
  bigquery: 'bigquery',
  redshift: 'redshift',
  mysql: 'mysql',
  mariadb: 'mariadb',
  sqlserver: 'transactsql',
};

/**
 * The grammar of a warehouse of `type`. No warehouse declared (undefined) is the agent's own: its embedded
 * DuckDB or the PostgreSQL it is given, both read with PostgreSQL's grammar.
 */
export function sqlGrammarOf(type: string | undefined): string {
  return type !== undefined && Object.hasOwn(SQL_GRAMMARS, type) ? SQL_GRAMMARS[type as WarehouseType] : 'postgresql';
}
