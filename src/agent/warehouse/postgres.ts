/**
 * PostgreSQL as an environment's warehouse, through `pg`. Each statement takes a client of a small pool;
 * a cancel asks the server to cancel that client's backend (`pg_cancel_backend`) from another client.
 * Statements are bounded by `statement_timeout` (the agent's deadline). Numbers come back as text when a
 * double cannot hold them exactly (bigint, numeric), as numbers otherwise.
 */
import { SQL_GRAMMARS } from '../../contract/sql-grammar.ts';
import pg from 'pg';
import { POSTGRES_DIALECT, type TableName } from '../../contract/sql-dialect.ts';
import { rowsOf, WarehouseError, type Column, type QueryResult, type RunResult, type Warehouse } from './warehouse.ts';

/** The commands whose count is the rows they wrote. */
const WRITE_COMMANDS = new Set(['INSERT', 'UPDATE', 'DELETE', 'MERGE']);

export interface PostgresWarehouseOptions {
  host?: string;
  port?: number;
  database?: string;
  user?: string;
  password?: string;
  /** Or all of it as one URL. */
  connectionString?: string;
  defaultSchema?: string;
  /** The longest a statement may run, in ms (0: no bound). */
  statementTimeoutMs?: number;
  /** Statements at once (iterations run concurrently up to this). */
  maxConnections?: number;
  /** The default schema exists already (made by whoever set up the role): not created on first use. */
  schemaExists?: boolean;
}

/** int8 (20) and numeric (1700) beyond a double's exact range stay text; within it they are numbers. */
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === 20 || oid === 1700) {
      return (text: string) => {
        const number = Number(text);
        return Number.isSafeInteger(number) || (oid === 1700 && String(number) === text) ? number : text;
      };
    }
    return pg.types.getTypeParser(oid, format);
  },
};

export class PostgresWarehouse implements Warehouse {
  readonly dialect = POSTGRES_DIALECT;
  readonly defaultDatabase?: string;
  readonly defaultSchema: string;
  readonly lineageNamespace: string;
  readonly sqlGrammar = SQL_GRAMMARS.postgres;
  private readonly pool: pg.Pool;
  private readonly config: pg.PoolConfig;
  private readonly active = new Set<number>();
  /** Clients whose search_path is set: the run's schema first, so unqualified names land in `[Environment Default]`. */
  private readonly prepared = new WeakSet<pg.PoolClient>();
  private schemaReady?: Promise<void>;

  constructor(options: PostgresWarehouseOptions) {
    this.defaultDatabase = options.database;
    this.defaultSchema = options.defaultSchema ?? 'public';
    const url =
      options.connectionString !== undefined && URL.canParse(options.connectionString)
        ? new URL(options.connectionString)
        : undefined;
    this.lineageNamespace = `postgres://${url?.hostname || options.host || 'localhost'}:${url?.port || options.port || 5432}`;
    this.config = {
      ...(options.connectionString !== undefined && { connectionString: options.connectionString }),
      ...(options.host !== undefined && { host: options.host }),
      ...(options.port !== undefined && { port: options.port }),
      ...(options.database !== undefined && { database: options.database }),
      ...(options.user !== undefined && { user: options.user }),
      ...(options.password !== undefined && { password: options.password }),
      max: options.maxConnections ?? 4,
      types,
      ...(options.statementTimeoutMs && { statement_timeout: options.statementTimeoutMs }),
    };
    this.pool = new pg.Pool(this.config);
    if (options.schemaExists) this.schemaReady = Promise.resolve();
    // An idle client's error (the server restarting) is not the run's; the next statement reconnects.
    this.pool.on('error', () => undefined);
  }

  /** The default schema exists before the first statement (a schema per account and environment). */
  private ensureSchema(): Promise<void> {
    this.schemaReady ??= this.pool
      .query(`CREATE SCHEMA IF NOT EXISTS ${this.quoteIdentifier(this.defaultSchema)}`)
      .then(() => undefined)
      .catch((error: unknown) => {
        this.schemaReady = undefined;
        throw new WarehouseError(error instanceof Error ? error.message : String(error));
      });
    return this.schemaReady;
  }

  private async withClient<T>(signal: AbortSignal, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    signal.throwIfAborted();
    await this.ensureSchema();
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      throw new WarehouseError(error instanceof Error ? error.message : String(error));
    }
    const pid = (client as unknown as { processID: number }).processID;
    this.active.add(pid);
    const onAbort = () => void this.cancelBackend(pid);
    signal.addEventListener('abort', onAbort, { once: true });
    let broken = false;
    try {
      if (!this.prepared.has(client)) {
        await client.query(`SET search_path TO ${this.quoteIdentifier(this.defaultSchema)}, public`);
        this.prepared.add(client);
      }
      return await work(client);
    } catch (error) {
      broken = !(error instanceof Error && 'code' in error);
      signal.throwIfAborted();
      throw new WarehouseError(error instanceof Error ? error.message : String(error));
    } finally {
      signal.removeEventListener('abort', onAbort);
      this.active.delete(pid);
      client.release(broken);
    }
  }

  private async cancelBackend(pid: number): Promise<void> {
    // A client of its own: the pool's may all be busy with the statements being cancelled.
    const client = new pg.Client({ ...this.config, statement_timeout: 10_000 });
    try {
      await client.connect();
      await client.query('SELECT pg_cancel_backend($1)', [pid]);
    } catch {
      // The statement ended first, or the server is gone: nothing is left to cancel.
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  async run(sql: string, signal: AbortSignal): Promise<RunResult> {
    // The simple protocol: a script of several statements runs as one implicit transaction.
    const answer = await this.withClient(signal, (client) => client.query(sql));
    // One result per statement for a script, one for a single statement.
    const results = (Array.isArray(answer) ? answer : [answer]) as pg.QueryResult[];
    let rowsWritten: number | undefined;
    for (const result of results) {
      // A SELECT with no columns is CREATE TABLE AS or SELECT INTO (its count is the rows it wrote).
      const writes = WRITE_COMMANDS.has(result.command) || (result.command === 'SELECT' && result.fields.length === 0);
      if (writes && typeof result.rowCount === 'number') rowsWritten = (rowsWritten ?? 0) + result.rowCount;
    }
    return rowsWritten === undefined ? {} : { rowsWritten };
  }

  async query(sql: string, signal: AbortSignal): Promise<QueryResult> {
    return this.withClient(signal, async (client) => {
      const result = await client.query({ text: sql, rowMode: 'array' });
      const columns = result.fields.map((field) => field.name);
      const rows = rowsOf(columns, result.rows as unknown[][]);
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
    const schema = table.schema ?? this.defaultSchema;
    const { rows } = await this.query(
      `SELECT column_name, data_type FROM information_schema.columns
        WHERE table_schema = ${this.quoteLiteral(schema)} AND table_name = ${this.quoteLiteral(table.table)}
        ORDER BY ordinal_position`,
      signal,
    );
    if (rows.length === 0) throw new WarehouseError(`relation "${schema}.${table.table}" does not exist`);
    return rows.map((row) => ({ name: String(row.column_name), type: String(row.data_type) }));
  }

  async cancel(): Promise<void> {
    await Promise.all([...this.active].map((pid) => this.cancelBackend(pid)));
  }

  async close(): Promise<void> {
    await this.cancel();
    await this.pool.end();
  }
}
