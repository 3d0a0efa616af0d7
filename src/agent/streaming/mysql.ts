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
import type { ObjectStore } from './object-store.ts';
import { CHANGE_FILE, SNAPSHOT_FILE, folderOf, lines, snapshotModeOf, tableKey, type ChangeEvent } from './pipeline.ts';
import { SourceNotReady, type TableName } from './postgres.ts';
import { loadState, saveState, type StreamingState } from './state.ts';

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
  prefix: string;
  stateDir: string;
  connection: MysqlConnection;
  target: ObjectStore;
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

const fileKey = (position: string) => binlogKey(position).toString(16).toUpperCase().padStart(16, '0');
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

interface Transaction {
  position: string;
  commitMs: number;
  events: ChangeEvent[];
}

export async function runMysqlPipeline(settings: MysqlRunSettings): Promise<StreamingRunEnd> {
  const { target, pipelineId, tables, prefix, signal, connection } = settings;
  const batchChanges = settings.batchChanges ?? 5_000;
  const batchMs = settings.batchMs ?? 200;
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
    for (const { schema, table } of tables) {
      const folder = folderOf(prefix, schema, table);
      for (const name of await target.list(folder)) if (SNAPSHOT_FILE.test(name)) await target.remove(folder + name);
    }
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
          const folder = folderOf(prefix, schema, table);
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
            await target.put(`${folder}${fileKey(position)}-snapshot-${String(part).padStart(6, '0')}.jsonl`, lines(events));
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
      await saveState(settings.stateDir, pipelineId, state);
      settings.log('binlog position taken', { position, snapshot: mode });
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  const committed: StreamingState = state;
  const committedKey = () => binlogKey(committed.position);
  for (const { schema, table } of tables) {
    const folder = folderOf(prefix, schema, table);
    for (const name of await target.list(folder)) {
      const match = CHANGE_FILE.exec(name);
      if (match && BigInt(`0x${match[1]}`) > committedKey()) {
        settings.log('removing a change file written after the last committed position', { file: folder + name });
        await target.remove(folder + name);
      }
    }
  }
  settings.report(progress('streaming', 0));

  let batch: Transaction[] = [];
  let batchSize = 0;
  let batchStarted = 0;
  let lagSeconds = 0;
  let failure: Error | undefined;
  let writing: Promise<void> = Promise.resolve();
  let lastReport = 0;
  let trailing: NodeJS.Timeout | undefined;
  const report = () => {
    const wait = lastReport + 1000 - Date.now();
    if (wait > 0) {
      trailing ??= setTimeout(() => {
        trailing = undefined;
        report();
      }, wait);
      return;
    }
    lastReport = Date.now();
    settings.report(progress('streaming', lagSeconds));
  };
  let finish: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (finish = resolve));

  async function flush(): Promise<void> {
    // After a failed write nothing more is written or committed: the next start replays from the committed position.
    if (batch.length === 0 || failure) return;
    const transactions = batch;
    batch = [];
    batchSize = 0;
    const byTable = new Map<string, { first: string; last: string; events: ChangeEvent[] }>();
    for (const transaction of transactions) {
      for (const event of transaction.events) {
        const key = tableKey(event.schema, event.table);
        let entry = byTable.get(key);
        if (!entry) byTable.set(key, (entry = { first: transaction.position, last: transaction.position, events: [] }));
        entry.last = transaction.position;
        entry.events.push(event);
      }
    }
    await Promise.all(
      [...byTable.values()].map(({ first, last, events }) =>
        target.put(
          `${folderOf(prefix, events[0]!.schema, events[0]!.table)}${fileKey(first)}-${fileKey(last)}.jsonl`,
          lines(events),
        ),
      ),
    );
    const last = transactions.at(-1)!;
    committed.position = last.position;
    for (const [key, { events }] of byTable) committed.rowsPerTable[key] = (committed.rowsPerTable[key] ?? 0) + events.length;
    await saveState(settings.stateDir, pipelineId, committed);
    lagSeconds = Math.max(0, (Date.now() - last.commitMs) / 1000);
    report();
  }
  const scheduleFlush = () => {
    writing = writing.then(flush).catch((error: Error) => {
      failure ??= error;
      finish();
    });
  };

  const [file, offset] = [
    committed.position.slice(0, committed.position.lastIndexOf(':')),
    committed.position.slice(committed.position.lastIndexOf(':') + 1),
  ];
  let currentFile = file;
  let open: Transaction | undefined;
  const commit = (transaction: Transaction) => {
    if (binlogKey(transaction.position) <= committedKey()) return;
    for (const event of transaction.events) event.commitLsn = transaction.position;
    if (batch.length === 0) batchStarted = Date.now();
    batch.push(transaction);
    batchSize += transaction.events.length;
    if (batchSize >= batchChanges || Date.now() - batchStarted >= batchMs) scheduleFlush();
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
  const timer = setInterval(
    () => {
      if (batch.length > 0 && Date.now() - batchStarted >= batchMs) scheduleFlush();
      else if (batch.length === 0 && !open && lagSeconds !== 0) {
        lagSeconds = 0;
        report();
      }
    },
    Math.max(20, Math.floor(batchMs / 2)),
  );
  const onAbort = () => finish();
  signal.addEventListener('abort', onAbort, { once: true });
  // A stop that came while the run was getting ready.
  if (signal.aborted) finish();
  try {
    await finished;
    if (!failure) {
      scheduleFlush();
      await writing;
    }
  } finally {
    clearInterval(timer);
    clearTimeout(trailing);
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
