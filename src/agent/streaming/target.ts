/**
 * Where a streaming pipeline's changes go, whatever the source: change-event files in an object store
 * (FileTarget, here) or warehouse tables (warehouse-target.ts). The batcher (batcher.ts) hands a target
 * batches of whole transactions; the target writes each batch whole, and only then is the position
 * committed to the state folder. A target that keeps its own position (the warehouse, in the batch's own
 * transaction) answers it on recovery, so the run never writes a batch twice.
 */
import type { ObjectStore } from './object-store.ts';

export interface TableName {
  schema: string;
  table: string;
}

/** A source column as the source's catalog (information_schema.columns) describes it. */
export interface SourceColumn {
  name: string;
  dataType: string;
  precision: number | null;
  scale: number | null;
}

/** A change event: one line of a change file, one row of a change table. */
export interface ChangeEvent {
  op: 'snapshot' | 'insert' | 'update' | 'delete' | 'truncate';
  schema: string;
  table: string;
  /** The source position of the change (for a snapshot row, the consistent point). */
  lsn: string;
  /** The end of its transaction: the position the pipeline resumes after. */
  commitLsn: string;
  commitTime: string;
  xid: number | null;
  /** Deletes and updates: the old row where the source gives it (the key by default). */
  before: Record<string, unknown> | null;
  /** Snapshot rows, inserts and updates: the new row. */
  after: Record<string, unknown> | null;
}

/** A committed source transaction: its end position, that position as 16 hex digits that sort, its changes. */
export interface Transaction {
  position: string;
  key: string;
  commitMs: number;
  events: ChangeEvent[];
}

/** A batch as a target writes it: whole transactions in commit order, and the row counts once it is written. */
export interface Batch {
  transactions: Transaction[];
  /** The position the batch ends at (its last transaction's). */
  position: string;
  key: string;
  /** Rows per `schema.table` since the first start, this batch included. */
  rowsPerTable: Record<string, number>;
}

/** What a target holds committed beyond the state folder's position (a crash came between the two). */
export interface TargetPosition {
  position: string;
  key: string;
  rowsPerTable: Record<string, number>;
}

export interface ChangeTarget {
  describe(): string;
  /** A first start, or a snapshot a crash cut short: removes what an unfinished snapshot left. */
  resetSnapshot(tables: TableName[]): Promise<void>;
  /** One part (numbered from 1) of a table's snapshot, every event op `snapshot`, at the consistent point `key`. */
  writeSnapshot(table: TableName, key: string, part: number, events: ChangeEvent[]): Promise<void>;
  /** The snapshot is complete (or skipped): the stream begins after `position`. */
  streamFrom(position: string, key: string, rowsPerTable: Record<string, number>): Promise<void>;
  /**
   * On every start, before streaming from the committed position `key`: removes anything written after
   * it, and answers a later position the target itself committed (then the run resumes from that).
   */
  recover(
    tables: TableName[],
    key: string,
    log: (message: string, fields?: Record<string, unknown>) => void,
  ): Promise<TargetPosition | undefined>;
  /** Writes a batch whole. */
  write(batch: Batch): Promise<void>;
  close(): Promise<void>;
}

export const tableKey = (schema: string, table: string) => `${schema}.${table}`;

export function folderOf(prefix: string, schema: string, table: string): string {
  const base = prefix.replace(/^\/+/, '').replace(/\/*$/, '');
  return `${base ? `${base}/` : ''}${schema}/${table}/`;
}

export const SNAPSHOT_FILE = /^([0-9A-F]{16})-snapshot-(\d+)\.(?:jsonl|parquet)$/;
export const CHANGE_FILE = /^([0-9A-F]{16})-([0-9A-F]{16})\.(?:jsonl|parquet)$/;

/** How change files are written: JSON lines, or Parquet (`advancedProperties["file.format"]`). */
export const FILE_FORMATS = ['jsonl', 'parquet'] as const;
export type FileFormat = (typeof FILE_FORMATS)[number];

/**
 * The events as one Parquet file (hyparquet-writer, loaded on first use): a row per event with the JSON
 * lines' fields as columns; `before` and `after` are JSON columns, `xid` an INT64 (null where none).
 */
async function parquetOf(events: ChangeEvent[]): Promise<Uint8Array> {
  const { parquetWriteBuffer } = await import('hyparquet-writer');
  const text = (pick: (event: ChangeEvent) => string | null) => events.map(pick);
  const buffer = parquetWriteBuffer({
    columnData: [
      { name: 'op', data: text((event) => event.op), type: 'STRING', nullable: false },
      { name: 'schema', data: text((event) => event.schema), type: 'STRING', nullable: false },
      { name: 'table', data: text((event) => event.table), type: 'STRING', nullable: false },
      { name: 'lsn', data: text((event) => event.lsn), type: 'STRING' },
      { name: 'commitLsn', data: text((event) => event.commitLsn), type: 'STRING' },
      { name: 'commitTime', data: text((event) => event.commitTime), type: 'STRING' },
      { name: 'xid', data: events.map((event) => (typeof event.xid === 'number' ? BigInt(event.xid) : null)), type: 'INT64' },
      { name: 'before', data: text((event) => (event.before == null ? null : JSON.stringify(event.before))), type: 'JSON' },
      { name: 'after', data: text((event) => (event.after == null ? null : JSON.stringify(event.after))), type: 'JSON' },
    ],
  });
  return new Uint8Array(buffer);
}

const EVENT_KEYS = 'op,schema,table,lsn,commitLsn,commitTime,xid,before,after';

/**
 * The events as JSON lines: each line exactly JSON.stringify(event). An event whose keys come in the order
 * the PostgreSQL source makes them (and whose rows are not undefined) is written by parts: the part shared by
 * a table's events of one transaction is made once, and only the position and the rows are stringified (a
 * whole event through JSON.stringify per line was the bulk of the agent's time). Any other event (the MySQL
 * source orders its keys otherwise) goes through JSON.stringify whole.
 */
export function lines(events: ChangeEvent[]): string {
  const out: string[] = new Array(events.length + 1);
  let heads = new Map<string, string>();
  let tailOf: ChangeEvent | undefined;
  let tail = '';
  for (let i = 0; i < events.length; i += 1) {
    const event = events[i]!;
    const { before, after } = event;
    if (
      typeof before !== 'object' ||
      typeof after !== 'object' ||
      typeof event.lsn !== 'string' ||
      typeof event.commitLsn !== 'string' ||
      typeof event.commitTime !== 'string' ||
      (event.xid !== null && typeof event.xid !== 'number') ||
      Object.keys(event).join(',') !== EVENT_KEYS
    ) {
      out[i] = JSON.stringify(event);
      continue;
    }
    const headKey = `${event.op}\u0000${event.schema}\u0000${event.table}`;
    let head = heads.get(headKey);
    if (head === undefined) {
      if (heads.size > 1000) heads = new Map();
      head = `{"op":${JSON.stringify(event.op)},"schema":${JSON.stringify(event.schema)},"table":${JSON.stringify(event.table)},"lsn":`;
      heads.set(headKey, head);
    }
    if (
      tailOf === undefined ||
      tailOf.commitLsn !== event.commitLsn ||
      tailOf.commitTime !== event.commitTime ||
      tailOf.xid !== event.xid
    ) {
      tailOf = event;
      tail = `,"commitLsn":${JSON.stringify(event.commitLsn)},"commitTime":${JSON.stringify(event.commitTime)},"xid":${JSON.stringify(event.xid)},"before":`;
    }
    out[i] = `${head}${JSON.stringify(event.lsn)}${tail}${JSON.stringify(before)},"after":${JSON.stringify(after)}}`;
  }
  out[events.length] = '';
  return events.length === 0 ? '\n' : out.join('\n');
}

/** Position keys (16 hex digits) compared as numbers. */
export const keyValue = (key: string) => BigInt(`0x${key}`);

/**
 * Files of change events (JSON lines) under `prefix/schema/table/` of an object store: snapshot parts
 * `<L>-snapshot-<n>.jsonl`, batches `<F>-<T>.jsonl` named by their first and last transaction. A file
 * is written whole; one whose first transaction is after the committed position was never committed and is
 * removed on the next start (its changes are written again by the replay).
 */
export class FileTarget implements ChangeTarget {
  constructor(
    readonly store: ObjectStore,
    readonly prefix: string,
    readonly format: FileFormat = 'jsonl',
  ) {}

  /** Writes `events` to `name` (without extension) in the target's format. */
  private async put(name: string, events: ChangeEvent[]): Promise<void> {
    if (this.format === 'parquet')
      await this.store.put(`${name}.parquet`, await parquetOf(events), 'application/vnd.apache.parquet');
    else await this.store.put(`${name}.jsonl`, lines(events));
  }

  describe(): string {
    return this.store.describe();
  }

  async resetSnapshot(tables: TableName[]): Promise<void> {
    for (const { schema, table } of tables) {
      const folder = folderOf(this.prefix, schema, table);
      for (const name of await this.store.list(folder)) if (SNAPSHOT_FILE.test(name)) await this.store.remove(folder + name);
    }
  }

  async writeSnapshot({ schema, table }: TableName, key: string, part: number, events: ChangeEvent[]): Promise<void> {
    await this.put(`${folderOf(this.prefix, schema, table)}${key}-snapshot-${String(part).padStart(6, '0')}`, events);
  }

  async streamFrom(): Promise<void> {
    // The state folder holds the position: nothing to keep here.
  }

  async recover(tables: TableName[], key: string, log: (message: string, fields?: Record<string, unknown>) => void) {
    for (const { schema, table } of tables) {
      const folder = folderOf(this.prefix, schema, table);
      for (const name of await this.store.list(folder)) {
        const match = CHANGE_FILE.exec(name);
        if (match && keyValue(match[1]!) > keyValue(key)) {
          log('removing a change file written after the last committed position', { file: folder + name });
          await this.store.remove(folder + name);
        } else if (name.endsWith('.tmp')) await this.store.remove(folder + name);
      }
    }
    return undefined;
  }

  async write(batch: Batch): Promise<void> {
    const byTable = new Map<string, { first: string; last: string; events: ChangeEvent[] }>();
    for (const transaction of batch.transactions) {
      for (const event of transaction.events) {
        const name = tableKey(event.schema, event.table);
        let entry = byTable.get(name);
        if (!entry) byTable.set(name, (entry = { first: transaction.key, last: transaction.key, events: [] }));
        entry.last = transaction.key;
        entry.events.push(event);
      }
    }
    await Promise.all(
      [...byTable.values()].map(({ first, last, events }) =>
        this.put(`${folderOf(this.prefix, events[0]!.schema, events[0]!.table)}${first}-${last}`, events),
      ),
    );
  }

  async close(): Promise<void> {}
}
