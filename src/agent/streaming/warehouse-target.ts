/**
 * Warehouse tables as a streaming target (what the agent does for a `snowflake` target): the agent's own
 * warehouse stands in for Snowflake — the one its pipelines run on when their environment names none
 * (PostgreSQL at DPC_AGENT_WAREHOUSE_URL, else the embedded DuckDB of the account). Per source table, in
 * the target's `tableSchema`:
 *
 * - a change table `<name>_changes`: every change event, in log order (`_dpc_position_key`, `_dpc_seq`),
 *   with its op, position, commit time and the row (the old row or key for a delete);
 * - with transformationType copy_table or copy_table_soft_delete, an applied copy `<name>`: the current
 *   rows, applied by key (insert and update replace the row of their key, delete removes it or, soft, marks
 *   it `_dpc_deleted`, truncate empties the table or marks every row).
 *
 * A batch is one warehouse transaction: its change rows, its effect on the applied copies and the
 * pipeline's position (table `_dpc_streaming_positions`) commit together or not at all, so a crash leaves
 * the warehouse at a batch boundary it names itself; the run resumes after that position (exactly once).
 * A column new at the source is added to both tables (with its type read from the source's catalog).
 */
import type { Warehouse } from '../warehouse/warehouse.ts';
import {
  tableKey,
  type Batch,
  type ChangeEvent,
  type ChangeTarget,
  type SourceColumn,
  type TableName,
  type TargetPosition,
} from './target.ts';

/** A target definition this agent cannot honour (named in the message): the start fails with it. */
export class TargetRefused extends Error {}

export const TRANSFORMATION_TYPES = ['copy_table', 'copy_table_soft_delete', 'change_log'] as const;
export type TransformationType = (typeof TRANSFORMATION_TYPES)[number];
export const TEMPORAL_MAPPINGS = ['native', 'epoch'] as const;
export type TemporalMapping = (typeof TEMPORAL_MAPPINGS)[number];
export const TABLE_PREFIX_TYPES = ['prefix', 'source_database_and_schema', 'none'] as const;
export type TablePrefixType = (typeof TABLE_PREFIX_TYPES)[number];

/** What the target asks the source: a table's columns, and its key (primary key columns; empty: none). */
export interface SourceCatalog {
  describe(table: TableName): Promise<{ columns: SourceColumn[]; key: string[] }>;
}

export interface WarehouseTargetSettings {
  warehouse: Warehouse;
  pipelineId: string;
  /** The target's tableSchema: where the tables go. */
  schema: string;
  tablePrefixType: TablePrefixType;
  /** The source database (PostgreSQL), for source_database_and_schema; MySQL's database is its schema. */
  sourceDatabase?: string;
  transformationType: TransformationType;
  temporalMapping: TemporalMapping;
  catalog: SourceCatalog;
}

type Category = 'int' | 'float' | 'numeric' | 'bool' | 'date' | 'timestamp' | 'timestamptz' | 'time' | 'json' | 'text';

/** The kind of a source column, by its information_schema data_type (PostgreSQL's or MySQL's). */
export function categoryOf(dataType: string): Category {
  const type = dataType.toLowerCase();
  if (['smallint', 'integer', 'bigint', 'int', 'tinyint', 'mediumint', 'year'].includes(type)) return 'int';
  if (['real', 'double precision', 'float', 'double'].includes(type)) return 'float';
  if (['numeric', 'decimal'].includes(type)) return 'numeric';
  if (type === 'boolean') return 'bool';
  if (type === 'date') return 'date';
  if (type === 'timestamp without time zone' || type === 'datetime') return 'timestamp';
  // MySQL's TIMESTAMP is an instant (kept in UTC).
  if (type === 'timestamp with time zone' || type === 'timestamp') return 'timestamptz';
  if (type === 'time without time zone' || type === 'time') return 'time';
  if (['json', 'jsonb', 'array'].includes(type)) return 'json';
  return 'text';
}

const TEMPORAL = new Set<Category>(['date', 'timestamp', 'timestamptz']);

const pad = (value: number, width = 2) => String(value).padStart(width, '0');
/** A Date the driver made from a zone-less value (at the agent's local time), written back as that wall time. */
const localDate = (date: Date) => `${pad(date.getFullYear(), 4)}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
const localDateTime = (date: Date) =>
  `${localDate(date)} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`;

function quoteString(text: string): string {
  // A NUL cannot be in a SQL text (nor in a PostgreSQL text value); it is dropped.
  return `'${text.replaceAll('\u0000', '').replaceAll("'", "''")}'`;
}

function textOf(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return `\\x${value.toString('hex')}`;
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

interface Column {
  name: string;
  category: Category;
  sqlType: string;
}

/** A key's last state in a batch: its row (deleted: the last row known, or the key alone) and the change that left it. */
interface Applied {
  row: Record<string, unknown>;
  deleted: boolean;
  event: ChangeEvent;
  /** The row is whole (written by this batch), not just a key. */
  known: boolean;
  /** An update that left values out (unchanged TOAST): only its given values are set. */
  patch?: boolean;
}

interface TableInfo {
  source: TableName;
  changes: string;
  applied: string | undefined;
  /** Columns of both tables, by name (source columns only). */
  columns: Map<string, Column>;
  key: string[];
}

const META_CHANGE = [
  '_dpc_op',
  '_dpc_position',
  '_dpc_position_key',
  '_dpc_seq',
  '_dpc_lsn',
  '_dpc_commit_time',
  '_dpc_xid',
  '_dpc_before',
];
const POSITIONS = '_dpc_streaming_positions';

export class WarehouseTarget implements ChangeTarget {
  private readonly tables = new Map<string, TableInfo>();
  /** Writes are not cancelled half-way: a stop waits for the batch in hand. */
  private readonly signal = new AbortController().signal;
  private schemaReady = false;

  constructor(private readonly settings: WarehouseTargetSettings) {}

  describe(): string {
    return `warehouse tables in ${this.settings.schema} (${this.settings.warehouse.dialect.name})`;
  }

  private get duckdb(): boolean {
    return this.settings.warehouse.dialect.name === 'duckdb';
  }

  private q(name: string): string {
    return this.settings.warehouse.quoteIdentifier(name);
  }

  private qualified(table: string): string {
    return `${this.q(this.settings.schema)}.${this.q(table)}`;
  }

  /** The target table's base name for a source table, as tablePrefixType says. */
  nameOf({ schema, table }: TableName): string {
    switch (this.settings.tablePrefixType) {
      case 'none':
        return table;
      case 'prefix':
        return `${schema}_${table}`;
      case 'source_database_and_schema':
        return this.settings.sourceDatabase ? `${this.settings.sourceDatabase}_${schema}_${table}` : `${schema}_${table}`;
    }
  }

  /** Refuses two source tables that would share target tables (tablePrefixType none across schemas). */
  checkNames(tables: TableName[]): void {
    const seen = new Map<string, string>();
    for (const table of tables) {
      const name = this.nameOf(table).toLowerCase();
      const other = seen.get(name);
      if (other) {
        throw new TargetRefused(
          `streamingTarget.tablePrefixType is ${this.settings.tablePrefixType}: ${other} and ${tableKey(table.schema, table.table)} would both write the table ${this.nameOf(table)}; choose prefix or source_database_and_schema`,
        );
      }
      seen.set(name, tableKey(table.schema, table.table));
    }
  }

  private sqlType(category: Category, column: SourceColumn | undefined): string {
    const duck = this.duckdb;
    if (TEMPORAL.has(category) && this.settings.temporalMapping === 'epoch') return 'BIGINT';
    switch (category) {
      case 'int':
        return 'BIGINT';
      case 'float':
        return duck ? 'DOUBLE' : 'DOUBLE PRECISION';
      case 'numeric':
        if (!duck) return 'NUMERIC';
        return column?.precision && column.precision <= 38 ? `DECIMAL(${column.precision},${column.scale ?? 0})` : 'DOUBLE';
      case 'bool':
        return 'BOOLEAN';
      case 'date':
        return 'DATE';
      case 'timestamp':
        return 'TIMESTAMP';
      case 'timestamptz':
        return 'TIMESTAMPTZ';
      case 'time':
        return 'TIME';
      case 'json':
        return duck ? 'VARCHAR' : 'JSONB';
      case 'text':
        return duck ? 'VARCHAR' : 'TEXT';
    }
  }

  /** A value as a SQL literal for a column of `category`. */
  private literal(value: unknown, category: Category): string {
    if (value === null || value === undefined) return 'NULL';
    if (TEMPORAL.has(category)) {
      if (this.settings.temporalMapping === 'epoch') {
        const ms = value instanceof Date ? value.getTime() : typeof value === 'number' ? value : Date.parse(textOf(value));
        return Number.isFinite(ms) ? String(Math.round(ms)) : 'NULL';
      }
      if (value instanceof Date) {
        if (Number.isNaN(value.getTime())) return 'NULL';
        if (category === 'date') return quoteString(localDate(value));
        if (category === 'timestamp') return quoteString(localDateTime(value));
        return quoteString(value.toISOString());
      }
      return quoteString(textOf(value));
    }
    switch (category) {
      case 'int':
      case 'float':
      case 'numeric':
        if (typeof value === 'number' && Number.isFinite(value)) return String(value);
        if (typeof value === 'bigint') return String(value);
        if (typeof value === 'boolean') return value ? '1' : '0';
        return quoteString(textOf(value));
      case 'bool':
        if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
        if (typeof value === 'number') return value ? 'TRUE' : 'FALSE';
        return quoteString(textOf(value));
      case 'json':
        return quoteString(JSON.stringify(value));
      default:
        return quoteString(textOf(value));
    }
  }

  private async run(statements: string[]): Promise<void> {
    if (statements.length === 0) return;
    // PostgreSQL runs a script of several statements as one implicit transaction; DuckDB needs it said.
    const script = this.duckdb ? ['BEGIN TRANSACTION', ...statements, 'COMMIT'] : statements;
    await this.settings.warehouse.run(script.join(';\n'), this.signal);
  }

  private async ensureSchema(): Promise<void> {
    if (this.schemaReady) return;
    // Made only when missing: PostgreSQL checks the right to create before it looks whether the schema exists.
    const { rows } = await this.settings.warehouse.query(
      `SELECT 1 AS found FROM information_schema.schemata WHERE schema_name = ${quoteString(this.settings.schema)}`,
      this.signal,
    );
    if (rows.length === 0) await this.settings.warehouse.run(`CREATE SCHEMA ${this.q(this.settings.schema)}`, this.signal);
    await this.settings.warehouse.run(
      `CREATE TABLE IF NOT EXISTS ${this.qualified(POSITIONS)} (pipeline_id VARCHAR NOT NULL, position VARCHAR NOT NULL, position_key VARCHAR NOT NULL, rows_per_table VARCHAR NOT NULL, updated_at TIMESTAMPTZ NOT NULL)`,
      this.signal,
    );
    this.schemaReady = true;
  }

  /** The warehouse's columns of a table (lower-cased names), or undefined when it does not exist. */
  private async existingColumns(table: string): Promise<Set<string> | undefined> {
    const { rows } = await this.settings.warehouse.query(
      `SELECT column_name FROM information_schema.columns WHERE table_schema = ${quoteString(this.settings.schema)} AND table_name = ${quoteString(table)}`,
      this.signal,
    );
    return rows.length === 0 ? undefined : new Set(rows.map((row) => String(row.column_name).toLowerCase()));
  }

  /**
   * The table's target tables, made or brought up to date: every column of the source's catalog, plus any
   * column in `seen` (a row's columns) — a column the catalog does not know (dropped since) is text.
   */
  private async prepare(source: TableName, seen: Iterable<string> = []): Promise<TableInfo> {
    await this.ensureSchema();
    const name = tableKey(source.schema, source.table);
    let info = this.tables.get(name);
    const missing = info ? [...seen].filter((column) => !info!.columns.has(column)) : [];
    if (info && missing.length === 0) return info;
    const described = await this.settings.catalog.describe(source);
    const base = this.nameOf(source);
    info ??= {
      source,
      changes: `${base}_changes`,
      applied: this.settings.transformationType === 'change_log' ? undefined : base,
      columns: new Map(),
      key: described.key,
    };
    const wanted: Column[] = described.columns.map((column) => {
      const category = categoryOf(column.dataType);
      return { name: column.name, category, sqlType: this.sqlType(category, column) };
    });
    for (const column of [...info.columns.keys(), ...seen]) {
      if (!wanted.some((known) => known.name === column))
        wanted.push({ name: column, category: 'text', sqlType: this.sqlType('text', undefined) });
    }
    const temporal = this.settings.temporalMapping === 'epoch' ? 'BIGINT' : 'TIMESTAMPTZ';
    const before = this.duckdb ? 'VARCHAR' : 'JSONB';
    const changeMeta = [
      '_dpc_op VARCHAR NOT NULL',
      '_dpc_position VARCHAR NOT NULL',
      '_dpc_position_key VARCHAR NOT NULL',
      '_dpc_seq BIGINT NOT NULL',
      '_dpc_lsn VARCHAR',
      `_dpc_commit_time ${temporal}`,
      '_dpc_xid BIGINT',
      `_dpc_before ${before}`,
    ];
    const appliedMeta = [
      '_dpc_position VARCHAR NOT NULL',
      `_dpc_commit_time ${temporal}`,
      ...(this.settings.transformationType === 'copy_table_soft_delete' ? ['_dpc_deleted BOOLEAN NOT NULL'] : []),
    ];
    const statements: string[] = [];
    for (const [table, meta] of [
      [info.changes, changeMeta],
      ...(info.applied ? [[info.applied, appliedMeta] as const] : []),
    ] as const) {
      const existing = await this.existingColumns(table);
      if (!existing) {
        const columns = [...meta, ...wanted.map((column) => `${this.q(column.name)} ${column.sqlType}`)];
        statements.push(`CREATE TABLE IF NOT EXISTS ${this.qualified(table)} (${columns.join(', ')})`);
        continue;
      }
      for (const column of wanted) {
        if (!existing.has(column.name.toLowerCase())) {
          statements.push(
            `ALTER TABLE ${this.qualified(table)} ADD COLUMN IF NOT EXISTS ${this.q(column.name)} ${column.sqlType}`,
          );
        }
      }
    }
    // Schema changes commit on their own: adding a column twice is harmless (IF NOT EXISTS).
    for (const statement of statements) await this.settings.warehouse.run(statement, this.signal);
    info.columns = new Map(wanted.map((column) => [column.name, column]));
    if (info.key.length === 0) info.key = described.key;
    this.tables.set(name, info);
    return info;
  }

  private async tableIfExists(table: string): Promise<boolean> {
    return (await this.existingColumns(table)) !== undefined;
  }

  async resetSnapshot(tables: TableName[]): Promise<void> {
    this.checkNames(tables);
    await this.ensureSchema();
    const statements: string[] = [
      `DELETE FROM ${this.qualified(POSITIONS)} WHERE pipeline_id = ${quoteString(this.settings.pipelineId)}`,
    ];
    for (const table of tables) {
      const base = this.nameOf(table);
      if (await this.tableIfExists(`${base}_changes`)) {
        statements.push(`DELETE FROM ${this.qualified(`${base}_changes`)} WHERE _dpc_op = 'snapshot'`);
      }
      if (this.settings.transformationType !== 'change_log' && (await this.tableIfExists(base))) {
        statements.push(`DELETE FROM ${this.qualified(base)}`);
      }
    }
    await this.run(statements);
  }

  /** Change-table rows for `events`, numbered from `seq`. */
  private changeRows(info: TableInfo, events: ChangeEvent[], key: string, commitMs: (event: ChangeEvent) => number): string[] {
    const columns = [...info.columns.values()];
    const statements: string[] = [];
    const names = [...META_CHANGE, ...columns.map((column) => column.name)].map((name) => this.q(name)).join(', ');
    const temporal = this.settings.temporalMapping === 'epoch';
    for (let start = 0; start < events.length; start += 1000) {
      const values = events.slice(start, start + 1000).map((event, index) => {
        const row = event.op === 'delete' ? event.before : event.after;
        const commitTime = temporal ? String(commitMs(event)) : quoteString(event.commitTime);
        return `(${[
          quoteString(event.op),
          quoteString(event.commitLsn),
          quoteString(key),
          String(start + index),
          quoteString(event.lsn),
          commitTime,
          event.xid === null ? 'NULL' : String(event.xid),
          event.before && event.op !== 'delete' ? quoteString(JSON.stringify(event.before)) : 'NULL',
          ...columns.map((column) => this.literal(row?.[column.name], column.category)),
        ].join(', ')})`;
      });
      statements.push(`INSERT INTO ${this.qualified(info.changes)} (${names}) VALUES ${values.join(',\n')}`);
    }
    return statements;
  }

  /** The columns that identify a row: the source's primary key, else every column. */
  private keyOf(info: TableInfo): string[] {
    return info.key.length > 0 ? info.key : [...info.columns.keys()];
  }

  /** `WHERE` for rows of the applied copy whose key is one of `rows`' keys. */
  private keyCondition(info: TableInfo, rows: Record<string, unknown>[]): string {
    const key = this.keyOf(info);
    const column = (name: string) => info.columns.get(name) ?? { name, category: 'text' as Category, sqlType: '' };
    if (key.length === 1) {
      const only = column(key[0]!);
      const values = rows.map((row) => row[only.name]);
      const present = values.filter((value) => value !== null && value !== undefined);
      const parts = [];
      if (present.length > 0)
        parts.push(`${this.q(only.name)} IN (${present.map((value) => this.literal(value, only.category)).join(', ')})`);
      if (present.length < values.length) parts.push(`${this.q(only.name)} IS NULL`);
      return parts.join(' OR ');
    }
    return rows
      .map(
        (row) =>
          `(${key.map((name) => `${this.q(name)} IS NOT DISTINCT FROM ${this.literal(row[name], column(name).category)}`).join(' AND ')})`,
      )
      .join(' OR ');
  }

  /**
   * The applied copy's statements for a table's events in log order: each key's last state (a row, or gone)
   * replaces what the copy holds for that key; a truncate first empties the copy (soft: marks every row).
   */
  private applyRows(info: TableInfo, events: ChangeEvent[], commitMs: (event: ChangeEvent) => number): string[] {
    if (!info.applied) return [];
    const soft = this.settings.transformationType === 'copy_table_soft_delete';
    const table = this.qualified(info.applied);
    const temporal = this.settings.temporalMapping === 'epoch';
    const keyText = (row: Record<string, unknown>) => JSON.stringify(this.keyOf(info).map((name) => textOf(row[name] ?? null)));
    /** Per key: the row it ends as (deleted: the last row known, or the key alone when none is) and the change that left it. */
    const last = new Map<string, Applied>();
    const statements: string[] = [];
    for (const event of events) {
      if (event.op === 'truncate') {
        // What came before is applied first; then the truncate empties (or, soft, marks) everything.
        statements.push(...this.flushApplied(info, [...last.values()], commitMs));
        last.clear();
        const commitTime = temporal ? String(commitMs(event)) : quoteString(event.commitTime);
        statements.push(
          soft
            ? `UPDATE ${table} SET _dpc_deleted = TRUE, _dpc_position = ${quoteString(event.commitLsn)}, _dpc_commit_time = ${commitTime} WHERE NOT _dpc_deleted`
            : `DELETE FROM ${table}`,
        );
        continue;
      }
      if (event.op === 'delete') {
        const before = event.before ?? {};
        const earlier = last.get(keyText(before));
        last.set(keyText(before), {
          row: earlier?.row ?? before,
          deleted: true,
          event,
          known: earlier ? (earlier.deleted ? earlier.known : !earlier.patch) : false,
        });
        continue;
      }
      const after = event.after ?? {};
      if (event.op === 'update' && event.before && keyText(event.before) !== keyText(after)) {
        // The key changed: the old key's row is gone.
        const earlier = last.get(keyText(event.before));
        last.set(keyText(event.before), {
          row: earlier?.row ?? event.before,
          deleted: true,
          event,
          known: earlier?.known ?? false,
        });
      }
      // pgoutput leaves out a TOASTed value an update did not change (undefined here): taken from this batch's
      // earlier row of the key, else only the values given are set on the row the copy holds.
      const unchanged = Object.keys(after).filter((column) => after[column] === undefined);
      if (unchanged.length > 0) {
        const earlier = last.get(keyText(after));
        if (earlier && !earlier.deleted && earlier.known && !earlier.patch) {
          const row = { ...after };
          for (const column of unchanged) row[column] = earlier.row[column];
          last.set(keyText(after), { row, deleted: false, event, known: true });
        } else last.set(keyText(after), { row: after, deleted: false, event, known: true, patch: true });
        continue;
      }
      last.set(keyText(after), { row: after, deleted: false, event, known: true });
    }
    statements.push(...this.flushApplied(info, [...last.values()], commitMs));
    return statements;
  }

  private flushApplied(info: TableInfo, entries: Applied[], commitMs: (event: ChangeEvent) => number): string[] {
    if (entries.length === 0) return [];
    const soft = this.settings.transformationType === 'copy_table_soft_delete';
    const table = this.qualified(info.applied!);
    const temporal = this.settings.temporalMapping === 'epoch';
    const columns = [...info.columns.values()];
    const statements: string[] = [];
    for (let start = 0; start < entries.length; start += 1000) {
      const chunk = entries.slice(start, start + 1000);
      // A soft delete of a row this batch did not write marks the row the copy holds.
      const markOnly = soft ? chunk.filter((entry) => entry.deleted && !entry.known) : [];
      const patches = chunk.filter((entry) => entry.patch);
      const replace = chunk.filter((entry) => !markOnly.includes(entry) && !entry.patch);
      for (const entry of patches) {
        const commitTime = temporal ? String(commitMs(entry.event)) : quoteString(entry.event.commitTime);
        const set = [
          `_dpc_position = ${quoteString(entry.event.commitLsn)}`,
          `_dpc_commit_time = ${commitTime}`,
          ...(soft ? ['_dpc_deleted = FALSE'] : []),
          ...columns
            .filter((column) => entry.row[column.name] !== undefined)
            .map((column) => `${this.q(column.name)} = ${this.literal(entry.row[column.name], column.category)}`),
        ];
        statements.push(`UPDATE ${table} SET ${set.join(', ')} WHERE ${this.keyCondition(info, [entry.row])}`);
      }
      if (markOnly.length > 0) {
        for (const entry of markOnly) {
          const commitTime = temporal ? String(commitMs(entry.event)) : quoteString(entry.event.commitTime);
          statements.push(
            `UPDATE ${table} SET _dpc_deleted = TRUE, _dpc_position = ${quoteString(entry.event.commitLsn)}, _dpc_commit_time = ${commitTime} WHERE ${this.keyCondition(info, [entry.row])}`,
          );
        }
      }
      if (replace.length === 0) continue;
      statements.push(
        `DELETE FROM ${table} WHERE ${this.keyCondition(
          info,
          replace.map((entry) => entry.row),
        )}`,
      );
      const rows = replace.filter((entry) => soft || !entry.deleted);
      if (rows.length === 0) continue;
      const names = [
        '_dpc_position',
        '_dpc_commit_time',
        ...(soft ? ['_dpc_deleted'] : []),
        ...columns.map((column) => column.name),
      ]
        .map((name) => this.q(name))
        .join(', ');
      const values = rows.map(
        (entry) =>
          `(${[
            quoteString(entry.event.commitLsn),
            temporal ? String(commitMs(entry.event)) : quoteString(entry.event.commitTime),
            ...(soft ? [entry.deleted ? 'TRUE' : 'FALSE'] : []),
            ...columns.map((column) => this.literal(entry.row[column.name], column.category)),
          ].join(', ')})`,
      );
      statements.push(`INSERT INTO ${table} (${names}) VALUES ${values.join(',\n')}`);
    }
    return statements;
  }

  private positionStatements(position: string, key: string, rowsPerTable: Record<string, number>): string[] {
    const id = quoteString(this.settings.pipelineId);
    return [
      `DELETE FROM ${this.qualified(POSITIONS)} WHERE pipeline_id = ${id}`,
      `INSERT INTO ${this.qualified(POSITIONS)} (pipeline_id, position, position_key, rows_per_table, updated_at) VALUES (${id}, ${quoteString(position)}, ${quoteString(key)}, ${quoteString(JSON.stringify(rowsPerTable))}, ${quoteString(new Date().toISOString())})`,
    ];
  }

  async writeSnapshot(table: TableName, key: string, _part: number, events: ChangeEvent[]): Promise<void> {
    const columns = new Set(events.flatMap((event) => Object.keys(event.after ?? {})));
    const info = await this.prepare(table, columns);
    const commitMs = (event: ChangeEvent) => Date.parse(event.commitTime);
    await this.run([...this.changeRows(info, events, key, commitMs), ...this.applyRows(info, events, commitMs)]);
  }

  async streamFrom(position: string, key: string, rowsPerTable: Record<string, number>): Promise<void> {
    await this.ensureSchema();
    await this.run(this.positionStatements(position, key, rowsPerTable));
  }

  async recover(tables: TableName[], key: string): Promise<TargetPosition | undefined> {
    this.checkNames(tables);
    await this.ensureSchema();
    for (const table of tables) await this.prepare(table);
    const { rows } = await this.settings.warehouse.query(
      `SELECT position, position_key, rows_per_table FROM ${this.qualified(POSITIONS)} WHERE pipeline_id = ${quoteString(this.settings.pipelineId)}`,
      this.signal,
    );
    const row = rows[0];
    if (!row || BigInt(`0x${String(row.position_key)}`) <= BigInt(`0x${key}`)) return undefined;
    return {
      position: String(row.position),
      key: String(row.position_key),
      rowsPerTable: JSON.parse(String(row.rows_per_table)) as Record<string, number>,
    };
  }

  async write(batch: Batch): Promise<void> {
    const byTable = new Map<string, { source: TableName; events: ChangeEvent[]; keys: string[]; columns: Set<string> }>();
    const commitMsOf = new Map<ChangeEvent, number>();
    for (const transaction of batch.transactions) {
      for (const event of transaction.events) {
        const name = tableKey(event.schema, event.table);
        let entry = byTable.get(name);
        if (!entry)
          byTable.set(
            name,
            (entry = { source: { schema: event.schema, table: event.table }, events: [], keys: [], columns: new Set() }),
          );
        entry.events.push(event);
        entry.keys.push(transaction.key);
        for (const column of Object.keys(event.after ?? event.before ?? {})) entry.columns.add(column);
        commitMsOf.set(event, transaction.commitMs);
      }
    }
    const commitMs = (event: ChangeEvent) => commitMsOf.get(event) ?? Date.parse(event.commitTime);
    const statements: string[] = [];
    for (const { source, events, keys, columns } of byTable.values()) {
      const info = await this.prepare(source, columns);
      // Change rows of one transaction share its position key; _dpc_seq orders them within it.
      let index = 0;
      while (index < events.length) {
        let end = index;
        while (end < events.length && keys[end] === keys[index]) end += 1;
        statements.push(...this.changeRows(info, events.slice(index, end), keys[index]!, commitMs));
        index = end;
      }
      statements.push(...this.applyRows(info, events, commitMs));
    }
    statements.push(...this.positionStatements(batch.position, batch.key, batch.rowsPerTable));
    await this.run(statements);
  }

  async close(): Promise<void> {
    await this.settings.warehouse.close();
  }
}
