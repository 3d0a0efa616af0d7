/**
 * A MySQL or MariaDB source: the binary log in row format, read by @vlasky/zongji (over mysql2). There is no
 * slot: the position (binlog file and offset) lives only in the agent's state folder, and a restart reads
 * the binlog again from it (the source must keep its binlogs that long: `binlog_expire_logs_seconds`).
 * Batches, files and exactly-once at the target are as for PostgreSQL (pipeline.ts).
 */
import mysqlCallbacks from 'mysql2';
import type mysql from 'mysql2/promise';
import ZongJi from '@vlasky/zongji';
import type { StreamingProgress, StreamingRunEnd } from '../../contract/streaming.ts';
import { Batcher } from './batcher.ts';
import { snapshotModeOf } from './pipeline.ts';
import { SourceNotReady, type TableName } from './postgres.ts';
import { loadState, saveState, type StreamingState } from './state.ts';
import { tableKey, type ChangeEvent, type ChangeTarget, type SourceColumn, type Transaction } from './target.ts';

export interface MysqlConnection {
  host: string;
  port: number;
  user: string;
  password?: string;
}

export interface MysqlRunSettings {
  pipelineId: string;
  tables: TableName[];
  advancedProperties: Record<string, string>;
  stateDir: string;
  connection: MysqlConnection;
  target: ChangeTarget;
  signal: AbortSignal;
  report(progress: StreamingProgress): void;
  log(message: string, fields?: Record<string, unknown>): void;
  batchChanges?: number;
  batchMs?: number;
}

/** `mysql-bin.000003:1234` as a number that orders positions: the file's sequence number, then the offset. */
export function binlogKey(position: string): bigint {
  const match = /^(.*)\.(\d+):(\d+)$/.exec(position);
  if (!match) throw new Error(`not a binlog position: ${position}`);
  return (BigInt(match[2]!) << 32n) | BigInt(match[3]!);
}

export const fileKey = (position: string) => binlogKey(position).toString(16).toUpperCase().padStart(16, '0');
const quote = (name: string) => `\`${name.replaceAll('`', '``')}\``;
const SNAPSHOT_BATCH = 10_000;

/** A connection for promise queries, whose `raw` side streams rows. */
async function connect(connection: MysqlConnection): Promise<mysql.Connection & { raw: mysqlCallbacks.Connection }> {
  const raw = mysqlCallbacks.createConnection({ ...connection, connectTimeout: 15_000, supportBigNumbers: true });
  const client = raw.promise();
  await client.connect();
  return Object.assign(client, { raw });
}

/** Refuses a source without the binlog in row format (naming the setting) or without a table. */
async function check(connection: MysqlConnection, tables: TableName[]): Promise<void> {
  const client = await connect(connection);
  try {
    const [rows] = await client.query<mysql.RowDataPacket[]>(
      "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format')",
    );
    const settings = Object.fromEntries(rows.map((row) => [String(row.Variable_name), String(row.Value)]));
    if (settings.log_bin !== 'ON') {
      throw new SourceNotReady(
        `the source's log_bin is ${settings.log_bin ?? 'unknown'}; change data capture needs the binary log (log_bin) with binlog_format=ROW`,
      );
    }
    if (settings.binlog_format !== 'ROW') {
      throw new SourceNotReady(
        `the source's binlog_format is ${settings.binlog_format}; change data capture needs binlog_format=ROW`,
      );
    }
    for (const { schema, table } of tables) {
      const [found] = await client.query<mysql.RowDataPacket[]>(
        'SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?',
        [schema, table],
      );
      if (found.length === 0) throw new SourceNotReady(`the source has no table ${schema}.${table}`);
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A table's columns (information_schema) and primary key columns: what a warehouse target types its tables by. */
export async function describeMysqlTable(
  connection: MysqlConnection,
  table: TableName,
): Promise<{ columns: SourceColumn[]; key: string[] }> {
  const client = await connect(connection);
  try {
    const [rows] = await client.query<mysql.RowDataPacket[]>(
      `SELECT COLUMN_NAME AS name, DATA_TYPE AS dataType, NUMERIC_PRECISION AS \`precision\`, NUMERIC_SCALE AS scale, COLUMN_KEY AS columnKey
         FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ORDINAL_POSITION`,
      [table.schema, table.table],
    );
    return {
      columns: rows.map((row) => ({
        name: String(row.name),
        dataType: String(row.dataType),
        precision: row.precision === null ? null : Number(row.precision),
        scale: row.scale === null ? null : Number(row.scale),
      })),
      key: rows.filter((row) => row.columnKey === 'PRI').map((row) => String(row.name)),
    };
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function runMysqlPipeline(settings: MysqlRunSettings): Promise<StreamingRunEnd> {
  const { target, pipelineId, tables, signal, connection } = settings;
  const mode = snapshotModeOf(settings.advancedProperties);
  const wanted = new Set(tables.map(({ schema, table }) => tableKey(schema, table)));
  await check(connection, tables);
  let state = await loadState(settings.stateDir, pipelineId);
  const progress = (phase: StreamingProgress['phase'], lagSeconds: number): StreamingProgress => ({
    state: 'RUNNING',
    phase,
    position: state?.snapshot === 'done' ? state.position : null,
    lagSeconds,
    rowsPerTable: { ...(state?.rowsPerTable ?? {}) },
    reportedAt: new Date().toISOString(),
  });

  if (!state || state.snapshot !== 'done') {
    await target.resetSnapshot(tables);
    const client = await connect(connection);
    try {
      let position: string;
      if (mode === 'initial') {
        // The snapshot and the binlog position it is consistent with: a read lock held only while both are taken.
        await client.query('FLUSH TABLES WITH READ LOCK');
        await client.query('START TRANSACTION WITH CONSISTENT SNAPSHOT');
        position = await masterPosition(client);
        await client.query('UNLOCK TABLES');
        state = { slot: '', publication: '', snapshot: 'in-progress', snapshotLsn: position, position, rowsPerTable: {} };
        await saveState(settings.stateDir, pipelineId, state);
        settings.report(progress('snapshot', 0));
        const commitTime = new Date().toISOString();
        for (const { schema, table } of tables) {
          let part = 0;
          let rows: Record<string, unknown>[] = [];
          const flushRows = async () => {
            if (rows.length === 0) return;
            part += 1;
            const events = rows.map((row): ChangeEvent => ({
              op: 'snapshot',
              schema,
              table,
              lsn: position,
              commitLsn: position,
              commitTime,
              xid: null,
              before: null,
              after: row,
            }));
            await target.writeSnapshot({ schema, table }, fileKey(position), part, events);
            state!.rowsPerTable[tableKey(schema, table)] = (state!.rowsPerTable[tableKey(schema, table)] ?? 0) + rows.length;
            rows = [];
            settings.report(progress('snapshot', 0));
          };
          const stream = client.raw.query(`SELECT * FROM ${quote(schema)}.${quote(table)}`).stream();
          for await (const row of stream) {
            signal.throwIfAborted();
            rows.push({ ...(row as Record<string, unknown>) });
            if (rows.length >= SNAPSHOT_BATCH) await flushRows();
          }
          await flushRows();
        }
        await client.query('COMMIT');
        state.snapshot = 'done';
      } else {
        position = await masterPosition(client);
        state = { slot: '', publication: '', snapshot: 'done', snapshotLsn: position, position, rowsPerTable: {} };
      }
      await target.streamFrom(position, fileKey(position), state.rowsPerTable);
      await saveState(settings.stateDir, pipelineId, state);
      settings.log('binlog position taken', { position, snapshot: mode });
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  const committed: StreamingState = state;
  const ahead = await target.recover(tables, fileKey(committed.position), settings.log);
  if (ahead) {
    settings.log('the target holds a later position than the state folder: resuming from it', { position: ahead.position });
    committed.position = ahead.position;
    committed.rowsPerTable = ahead.rowsPerTable;
    await saveState(settings.stateDir, pipelineId, committed);
  }
  settings.report(progress('streaming', 0));

  let failure: Error | undefined;
  let finish: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  let open: Omit<Transaction, 'key'> | undefined;
  const batcher = new Batcher({
    pipelineId,
    stateDir: settings.stateDir,
    target,
    committed,
    committedKey: fileKey(committed.position),
    batchChanges: settings.batchChanges ?? 5_000,
    batchMs: settings.batchMs ?? 200,
    report: (lagSeconds) => settings.report(progress('streaming', lagSeconds)),
    onFailure(error) {
      failure ??= error;
      finish();
    },
    // The binlog has no keepalives that say what was sent: nothing open and nothing waiting is caught up.
    quiet: () => !open,
  });

  const [file, offset] = [
    committed.position.slice(0, committed.position.lastIndexOf(':')),
    committed.position.slice(committed.position.lastIndexOf(':') + 1),
  ];
  let currentFile = file;
  const commit = (transaction: Omit<Transaction, 'key'>) => {
    for (const event of transaction.events) event.commitLsn = transaction.position;
    // At or before the committed position: read again after a restart, and skipped.
    batcher.add({ ...transaction, key: fileKey(transaction.position) });
  };
  const zongji = new ZongJi({
    host: connection.host,
    port: connection.port,
    user: connection.user,
    password: connection.password,
  });
  zongji.on('binlog', (event: any) => {
    const name = event.getEventName() as string;
    const at = `${currentFile}:${event.nextPosition}`;
    if (name === 'rotate') {
      currentFile = event.binlogName;
      return;
    }
    if (name === 'query') {
      const query = String(event.query).trim();
      if (/^BEGIN$/i.test(query)) {
        open = { position: '', commitMs: event.timestamp, events: [] };
        return;
      }
      if (/^COMMIT$/i.test(query)) {
        if (open) commit({ ...open, position: at });
        open = undefined;
        return;
      }
      const truncate = /^TRUNCATE\s+(?:TABLE\s+)?(?:`?([^`.\s]+)`?\.)?`?([^`\s;]+)`?/i.exec(query);
      if (truncate) {
        const schema = truncate[1] ?? event.schema;
        const table = truncate[2]!;
        if (wanted.has(tableKey(schema, table))) {
          const commitTime = new Date(event.timestamp).toISOString();
          commit({
            position: at,
            commitMs: event.timestamp,
            events: [{ op: 'truncate', schema, table, lsn: at, commitLsn: at, commitTime, xid: null, before: null, after: null }],
          });
        }
      }
      return;
    }
    if (name === 'xid') {
      if (open) commit({ ...open, position: at });
      open = undefined;
      return;
    }
    if (name !== 'writerows' && name !== 'updaterows' && name !== 'deleterows') return;
    const entry = event.tableMap[event.tableId];
    if (!entry || !wanted.has(tableKey(entry.parentSchema, entry.tableName))) return;
    open ??= { position: '', commitMs: event.timestamp, events: [] };
    const base = {
      schema: entry.parentSchema as string,
      table: entry.tableName as string,
      lsn: at,
      commitLsn: '',
      commitTime: new Date(open.commitMs).toISOString(),
      xid: null,
    };
    for (const row of event.rows as Record<string, unknown>[]) {
      if (name === 'writerows') open.events.push({ ...base, op: 'insert', before: null, after: { ...row } });
      else if (name === 'deleterows') open.events.push({ ...base, op: 'delete', before: { ...row }, after: null });
      else {
        const { before, after } = row as { before: Record<string, unknown>; after: Record<string, unknown> };
        open.events.push({ ...base, op: 'update', before: { ...before }, after: { ...after } });
      }
    }
  });
  zongji.on('error', (error: Error) => {
    if (!signal.aborted) failure ??= error;
    finish();
  });
  zongji.start({
    // Another replica's server id would cut that replica off: one of our own per run.
    serverId: 100_000 + Math.floor(Math.random() * 1_000_000_000),
    filename: file,
    position: Number(offset),
    includeEvents: ['rotate', 'query', 'xid', 'tablemap', 'writerows', 'updaterows', 'deleterows'],
    includeSchema: Object.fromEntries(
      [...new Set(tables.map(({ schema }) => schema))].map((schema) => [
        schema,
        tables.filter((table) => table.schema === schema).map(({ table }) => table),
      ]),
    ),
  });
  const onAbort = () => finish();
  signal.addEventListener('abort', onAbort, { once: true });
  // A stop that came while the run was getting ready.
  if (signal.aborted) finish();
  try {
    await finished;
    if (!failure) await batcher.drain();
  } finally {
    batcher.close();
    signal.removeEventListener('abort', onAbort);
    zongji.stop();
  }
  if (failure) throw failure;
  return { state: 'STOPPED', position: committed.position, rowsPerTable: { ...committed.rowsPerTable } };
}

async function masterPosition(client: mysql.Connection): Promise<string> {
  const [rows] = await client.query<mysql.RowDataPacket[]>('SHOW MASTER STATUS');
  const row = rows[0];
  if (!row) throw new SourceNotReady("the source's binary log is off (SHOW MASTER STATUS is empty); set log_bin");
  return `${row.File}:${row.Position}`;
}
