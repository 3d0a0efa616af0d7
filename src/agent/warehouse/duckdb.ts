/**
 * The embedded warehouse: DuckDB in the agent's process, one database file per account and environment
 * under the agent's state folder. Nothing to install or configure. Each statement gets a connection of
 * its own, so concurrent iterations run side by side and a cancel interrupts exactly what is in flight.
 */
import { SQL_GRAMMARS } from '../../contract/sql-grammar.ts';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { DuckDBInstance, StatementType, type DuckDBConnection, type DuckDBMaterializedResult } from '@duckdb/node-api';
import { DUCKDB_DIALECT, qualifiedName, type TableName } from '../../contract/sql-dialect.ts';
import { rowsOf, WarehouseError, type Column, type QueryResult, type RunResult, type Warehouse } from './warehouse.ts';

/** The statements whose count of rows changed DuckDB tells as such (CREATE TABLE AS tells its own: createdRows). */
const WRITES = new Set<StatementType>([
  StatementType.INSERT,
  StatementType.UPDATE,
  StatementType.DELETE,
  StatementType.MERGE_INTO,
]);

/** The rows a CREATE statement wrote (CREATE TABLE AS), or undefined when it tells none. */
async function createdRows(result: DuckDBMaterializedResult): Promise<number | undefined> {
  if (result.columnCount !== 1 || result.columnName(0) !== 'Count') return undefined;
  const rows = await result.getRows();
  const count = rows.length === 1 ? rows[0][0] : undefined;
  return typeof count === 'bigint' || typeof count === 'number' ? Number(count) : undefined;
}

/** Names safe as a file name: the ids are UUIDs, anything else is reduced to word characters. */
function fileSafe(name: string): string {
  return name.replace(/[^\w-]/g, '_') || '_';
}

export function duckdbFile(stateDir: string, accountId: string, environmentId: string): string {
  return path.join(stateDir, 'warehouse', fileSafe(accountId), `${fileSafe(environmentId)}.duckdb`);
}

export interface DuckDbOptions {
  database?: string;
  schema?: string;
  /** The longest a statement may run, in ms (0: no bound); past it the statement is interrupted. */
  statementTimeoutMs?: number;
  /**
   * No file system or network access from SQL (read_csv, COPY TO, ATTACH, extensions): the database file
   * only. What a platform-hosted agent needs, where the SQL is a customer's and the machine the platform's.
   */
  sandboxed?: boolean;
}

export class DuckDbWarehouse implements Warehouse {
  readonly dialect = DUCKDB_DIALECT;
  readonly defaultDatabase?: string;
  readonly defaultSchema: string;
  readonly lineageNamespace: string;
  readonly sqlGrammar = SQL_GRAMMARS.duckdb;
  private readonly active = new Set<DuckDBConnection>();

  private readonly statementTimeoutMs: number;
  private readonly sandboxed: boolean;

  private constructor(
    private readonly instance: DuckDBInstance,
    options: DuckDbOptions,
    file: string,
  ) {
    // The embedded database of one environment: named by its file (the environment's id), not the agent's path.
    this.lineageNamespace = `duckdb://embedded/${file === ':memory:' ? 'memory' : path.basename(file, '.duckdb')}`;
    this.defaultDatabase = options.database;
    this.defaultSchema = options.schema ?? 'main';
    this.statementTimeoutMs = options.statementTimeoutMs ?? 0;
    this.sandboxed = options.sandboxed === true;
  }

  /** Opens (creating when new) the database `file`; one instance per file is shared within the process. */
  static async open(file: string, options: DuckDbOptions = {}): Promise<DuckDbWarehouse> {
    if (file !== ':memory:') await mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const instance = await DuckDBInstance.fromCache(file);
    return new DuckDbWarehouse(instance, options, file);
  }

  private async withConnection<T>(signal: AbortSignal, work: (connection: DuckDBConnection) => Promise<T>): Promise<T> {
    signal.throwIfAborted();
    const connection = await this.instance.connect();
    this.active.add(connection);
    const onAbort = () => connection.interrupt();
    signal.addEventListener('abort', onAbort, { once: true });
    let timedOut = false;
    const deadline =
      this.statementTimeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            connection.interrupt();
          }, this.statementTimeoutMs)
        : undefined;
    try {
      // Once off, external access stays off for the whole database instance (DuckDB refuses to turn it back on).
      if (this.sandboxed) await connection.run('SET enable_external_access = false');
      if (this.defaultSchema !== 'main') {
        await connection.run(`CREATE SCHEMA IF NOT EXISTS ${this.quoteIdentifier(this.defaultSchema)}`);
        await connection.run(`SET schema = ${this.quoteLiteral(this.defaultSchema)}`);
      }
      return await work(connection);
    } catch (error) {
      signal.throwIfAborted();
      if (timedOut)
        throw new WarehouseError(
          `The statement ran past its deadline of ${this.statementTimeoutMs / 1000} s and was interrupted.`,
        );
      throw new WarehouseError(error instanceof Error ? error.message : String(error));
    } finally {
      clearTimeout(deadline);
      signal.removeEventListener('abort', onAbort);
      this.active.delete(connection);
      connection.closeSync();
    }
  }

  async run(sql: string, signal: AbortSignal): Promise<RunResult> {
    return this.withConnection(signal, async (connection) => {
      // Statement by statement (as DuckDB runs a script anyway, each in its own autocommit), so that each
      // one's count of rows changed is read; a script's result would tell the last statement's only.
      const statements = await connection.extractStatements(sql);
      let rowsWritten: number | undefined;
      for (let i = 0; i < statements.count; i += 1) {
        const result = await (await statements.prepare(i)).run();
        if (WRITES.has(result.statementType)) rowsWritten = (rowsWritten ?? 0) + result.rowsChanged;
        else if (result.statementType === StatementType.CREATE) {
          // CREATE TABLE AS tells its rows as one row of a "Count" column (rowsChanged stays 0); a CREATE
          // without rows (a table, a view, a schema) answers none.
          const created = await createdRows(result);
          if (created !== undefined) rowsWritten = (rowsWritten ?? 0) + created;
        }
      }
      return rowsWritten === undefined ? {} : { rowsWritten };
    });
  }

  async query(sql: string, signal: AbortSignal): Promise<QueryResult> {
    return this.withConnection(signal, async (connection) => {
      const reader = await connection.runAndReadAll(sql);
      const columns = reader.columnNames();
      const rows = rowsOf(columns, reader.getRowsJS());
      return { columns, rows };
    });
  }

  quoteIdentifier(name: string): string {
    return this.dialect.quoteIdentifier(name);
  }

  quoteLiteral(value: unknown): string {
    return this.dialect.quoteLiteral(value);
  }

  async listColumns(table: TableName, signal: AbortSignal): Promise<Column[]> {
    const { rows } = await this.query(`DESCRIBE ${qualifiedName(this.dialect, table)}`, signal);
    return rows.map((row) => ({ name: String(row.column_name), type: String(row.column_type) }));
  }

  async cancel(): Promise<void> {
    for (const connection of this.active) connection.interrupt();
  }

  async close(): Promise<void> {
    await this.cancel();
    // The instance stays in the process's cache for the next run on this file.
  }
}
