/**
 * One streaming pipeline's run on this agent: PostgreSQL change data capture into change-event files.
 *
 * - First start: a publication for the tables and a replication slot; with `snapshot.mode` initial (the
 *   default) the tables' rows as of the slot's creation are written first (op `snapshot`).
 * - Then the change stream, in batches of whole transactions: each batch is written to the target (one file
 *   per table, named by the batch's first and last commit LSN), then the position is committed to the state
 *   folder (fsync'd), then the slot is acknowledged. A crash anywhere replays from the committed position;
 *   files written after it are removed before the replay writes them again, so the target holds each change once.
 * - Stop ends the stream after the batch in hand; the slot stays (DELETE ...?dropSlot=true drops it).
 */
import type pg from 'pg';
import type { Pgoutput } from 'pg-logical-replication';
import {
  DEFAULT_SNAPSHOT_MODE,
  SNAPSHOT_MODE_PROPERTY,
  SNAPSHOT_MODES,
  type SnapshotMode,
  type StreamingProgress,
  type StreamingRunEnd,
} from '../../contract/streaming.ts';
import { bigIntToLsn, compareLsn, lsnKey, lsnToBigInt } from './lsn.ts';
import type { ObjectStore } from './object-store.ts';
import { PostgresSource, type TableName } from './postgres.ts';
import { loadState, saveState, type StreamingState } from './state.ts';

/** A change event: one line of a change file. */
export interface ChangeEvent {
  op: 'snapshot' | 'insert' | 'update' | 'delete' | 'truncate';
  schema: string;
  table: string;
  /** The WAL position of the change (for a snapshot row, the slot's consistent point). */
  lsn: string;
  /** The end of its transaction: the position the pipeline resumes after. */
  commitLsn: string;
  commitTime: string;
  xid: number | null;
  /** Deletes and updates: the old row where the table's replica identity gives it (the key by default). */
  before: Record<string, unknown> | null;
  /** Snapshot rows, inserts and updates: the new row. */
  after: Record<string, unknown> | null;
}

export interface RunSettings {
  pipelineId: string;
  tables: TableName[];
  advancedProperties: Record<string, string>;
  /** The target's key prefix (may be empty). */
  prefix: string;
  stateDir: string;
  source: PostgresSource;
  target: ObjectStore;
  signal: AbortSignal;
  report(progress: StreamingProgress): void;
  log(message: string, fields?: Record<string, unknown>): void;
  /** Batch bounds: a batch is written once it holds this many changes, or is this old (ms). */
  batchChanges?: number;
  batchMs?: number;
}

const SNAPSHOT_BATCH = 10_000;

export function slotNameOf(pipelineId: string): string {
  return `dpc_${pipelineId.replaceAll('-', '').toLowerCase()}`;
}

export function snapshotModeOf(properties: Record<string, string>): SnapshotMode {
  const value = (properties[SNAPSHOT_MODE_PROPERTY] ?? DEFAULT_SNAPSHOT_MODE).toLowerCase();
  if (!(SNAPSHOT_MODES as readonly string[]).includes(value)) {
    throw new Error(`advancedProperties.${SNAPSHOT_MODE_PROPERTY} is ${value}; this agent knows ${SNAPSHOT_MODES.join(' and ')}`);
  }
  return value as SnapshotMode;
}

export const tableKey = (schema: string, table: string) => `${schema}.${table}`;

export function folderOf(prefix: string, schema: string, table: string): string {
  const base = prefix.replace(/^\/+/, '').replace(/\/*$/, '');
  return `${base ? `${base}/` : ''}${schema}/${table}/`;
}

export const SNAPSHOT_FILE = /^([0-9A-F]{16})-snapshot-(\d+)\.jsonl$/;
export const CHANGE_FILE = /^([0-9A-F]{16})-([0-9A-F]{16})\.jsonl$/;

export function lines(events: ChangeEvent[]): string {
  return events.map((event) => JSON.stringify(event)).join('\n') + '\n';
}

/** A transaction as the stream delivers it: begun, its changes, committed. */
interface Transaction {
  xid: number;
  commitLsn: string;
  commitTime: string;
  commitMs: number;
  events: ChangeEvent[];
}

export async function runPostgresPipeline(settings: RunSettings): Promise<StreamingRunEnd> {
  const { source, target, pipelineId, tables, prefix, signal } = settings;
  const batchChanges = settings.batchChanges ?? 5_000;
  const batchMs = settings.batchMs ?? 200;
  const slot = slotNameOf(pipelineId);
  const publication = slot;
  const mode = snapshotModeOf(settings.advancedProperties);
  const wanted = new Set(tables.map(({ schema, table }) => tableKey(schema, table)));

  await source.check(tables);
  let state = await loadState(settings.stateDir, pipelineId);
  const progress = (phase: StreamingProgress['phase'], lagSeconds: number): StreamingProgress => ({
    state: 'RUNNING',
    phase,
    position: state?.snapshot === 'done' ? state.position : null,
    lagSeconds,
    rowsPerTable: { ...(state?.rowsPerTable ?? {}) },
    reportedAt: new Date().toISOString(),
  });

  await source.ensurePublication(publication, tables);

  if (!state || state.snapshot !== 'done' || state.slot !== slot) {
    // No position (a first start, or a snapshot a crash cut short): begin again from a new slot.
    if (await source.slotExists(slot)) {
      settings.log('dropping a replication slot without a usable position', { slot });
      await source.dropSlot(slot, undefined);
    }
    for (const { schema, table } of tables) {
      const folder = folderOf(prefix, schema, table);
      for (const name of await target.list(folder)) if (SNAPSHOT_FILE.test(name)) await target.remove(folder + name);
    }
    const rowsPerTable: Record<string, number> = {};
    const start = async (lsn: string, snapshotDone: boolean) => {
      state = {
        slot,
        publication,
        snapshot: snapshotDone ? 'done' : 'in-progress',
        snapshotLsn: lsn,
        position: lsn,
        rowsPerTable,
      };
      await saveState(settings.stateDir, pipelineId, state);
    };
    if (mode === 'never') {
      await start(await source.createSlot(slot), true);
    } else {
      const lsn = await source.createSlot(slot, async (client, consistentPoint) => {
        await start(consistentPoint, false);
        settings.report(progress('snapshot', 0));
        await snapshotTables(client, consistentPoint);
      });
      state!.snapshot = 'done';
      state!.position = lsn;
      await saveState(settings.stateDir, pipelineId, state!);
    }
    settings.log('replication slot created', { slot, position: state!.position, snapshot: mode });
  }

  async function snapshotTables(client: pg.Client, lsn: string): Promise<void> {
    const commitTime = new Date().toISOString();
    for (const { schema, table } of tables) {
      const folder = folderOf(prefix, schema, table);
      let part = 0;
      for await (const rows of PostgresSource.rowsOf(client, { schema, table }, SNAPSHOT_BATCH)) {
        signal.throwIfAborted();
        const events = rows.map((row): ChangeEvent => ({
          op: 'snapshot',
          schema,
          table,
          lsn,
          commitLsn: lsn,
          commitTime,
          xid: null,
          before: null,
          after: row,
        }));
        part += 1;
        await target.put(`${folder}${lsnKey(lsn)}-snapshot-${String(part).padStart(6, '0')}.jsonl`, lines(events));
        const key = tableKey(schema, table);
        state!.rowsPerTable[key] = (state!.rowsPerTable[key] ?? 0) + rows.length;
        settings.report(progress('snapshot', 0));
      }
    }
  }

  const current: StreamingState = state!;
  // Files written after the committed position were never committed: the replay writes them again.
  for (const { schema, table } of tables) {
    const folder = folderOf(prefix, schema, table);
    for (const name of await target.list(folder)) {
      const match = CHANGE_FILE.exec(name);
      if (match && BigInt(`0x${match[1]}`) > lsnToBigInt(current.position)) {
        settings.log('removing a change file written after the last committed position', { file: folder + name });
        await target.remove(folder + name);
      } else if (name.endsWith('.tmp')) await target.remove(folder + name);
    }
  }

  settings.report(progress('streaming', 0));
  // After a crash the source may not yet have noticed that the old connection on the slot is gone.
  await source.waitForSlotIdle(slot, 30_000);
  return streamChanges(current);

  async function streamChanges(committed: StreamingState): Promise<StreamingRunEnd> {
    let open: Transaction | undefined;
    let batch: Transaction[] = [];
    let batchSize = 0;
    let batchStarted = 0;
    let lagSeconds = 0;
    let failure: Error | undefined;
    let writing: Promise<void> = Promise.resolve();
    let lastReport = 0;

    // At most one report a second; one held back is sent when its second is up, so the last state is always told.
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

    /** Writes the batch's files, commits the position, acknowledges the slot: in that order. */
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
          if (!entry) byTable.set(key, (entry = { first: transaction.commitLsn, last: transaction.commitLsn, events: [] }));
          entry.last = transaction.commitLsn;
          entry.events.push(event);
        }
      }
      await Promise.all(
        [...byTable.values()].map(({ first, last, events }) =>
          target.put(
            `${folderOf(prefix, events[0]!.schema, events[0]!.table)}${lsnKey(first)}-${lsnKey(last)}.jsonl`,
            lines(events),
          ),
        ),
      );
      const last = transactions.at(-1)!;
      committed.position = last.commitLsn;
      for (const [key, { events }] of byTable) committed.rowsPerTable[key] = (committed.rowsPerTable[key] ?? 0) + events.length;
      await saveState(settings.stateDir, pipelineId, committed);
      await stream.acknowledge(committed.position);
      lagSeconds = Math.max(0, (Date.now() - last.commitMs) / 1000);
      report();
    }

    /** Batches written or waiting to be: the stream reads on while one is written, and waits when a second is due. */
    let pending = 0;
    function scheduleFlush(): void {
      pending += 1;
      writing = writing
        .then(flush)
        .catch((error: Error) => {
          failure ??= error;
          finish();
        })
        .finally(() => (pending -= 1));
    }

    function onMessage(lsn: string, message: Pgoutput.Message): Promise<void> | void {
      switch (message.tag) {
        case 'begin': {
          const commitMs = Number((message.commitTime as unknown as bigint) / 1000n);
          open = { xid: message.xid, commitLsn: '', commitTime: new Date(commitMs).toISOString(), commitMs, events: [] };
          return;
        }
        case 'insert':
        case 'update':
        case 'delete': {
          if (!open) return;
          const { schema, name } = message.relation;
          if (!wanted.has(tableKey(schema, name))) return;
          open.events.push({
            op: message.tag,
            schema,
            table: name,
            lsn,
            commitLsn: '',
            commitTime: open.commitTime,
            xid: open.xid,
            before: message.tag === 'insert' ? null : (message.old ?? message.key ?? null),
            after: message.tag === 'delete' ? null : message.new,
          });
          return;
        }
        case 'truncate': {
          if (!open) return;
          for (const relation of message.relations) {
            if (!wanted.has(tableKey(relation.schema, relation.name))) continue;
            open.events.push({
              op: 'truncate',
              schema: relation.schema,
              table: relation.name,
              lsn,
              commitLsn: '',
              commitTime: open.commitTime,
              xid: open.xid,
              before: null,
              after: null,
            });
          }
          return;
        }
        case 'commit': {
          const transaction = open;
          open = undefined;
          if (!transaction) return;
          // pgoutput's own LSNs come zero-padded (00000000/0156A970): positions are kept in PostgreSQL's form.
          const end = bigIntToLsn(lsnToBigInt(message.commitEndLsn ?? lsn));
          // Already written before a restart: the slot hands it again until its acknowledgement arrived.
          if (compareLsn(end, committed.position) <= 0) return;
          transaction.commitLsn = end;
          for (const event of transaction.events) event.commitLsn = end;
          if (batch.length === 0) batchStarted = Date.now();
          batch.push(transaction);
          batchSize += transaction.events.length;
          if (batchSize >= batchChanges || Date.now() - batchStarted >= batchMs) {
            scheduleFlush();
            return pending > 1 ? writing : undefined;
          }
          return;
        }
        default:
          return;
      }
    }

    let finish: () => void = () => undefined;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const stream = settings.source.stream(slot, publication, committed.position, {
      onMessage,
      onKeepalive(_lsn, shouldRespond) {
        if (batch.length === 0 && !open) {
          lagSeconds = 0;
          report();
        }
        if (shouldRespond) void stream.acknowledge(committed.position).catch(() => undefined);
      },
      onError(error) {
        // A stop while the stream connects ends its connection mid-handshake: that is the stop, not a failure.
        if (!signal.aborted) failure ??= error;
        finish();
      },
    });
    stream.started.then(
      () => finish(),
      (error: Error) => {
        if (!signal.aborted) failure ??= error;
        finish();
      },
    );
    // A batch younger than batchMs is written when it comes of age, also when no more changes arrive.
    const timer = setInterval(
      () => {
        if (batch.length > 0 && Date.now() - batchStarted >= batchMs) scheduleFlush();
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
        // Stopping: write what is complete; a transaction still open is read again on the next start.
        scheduleFlush();
        await writing;
      }
    } finally {
      clearInterval(timer);
      clearTimeout(trailing);
      signal.removeEventListener('abort', onAbort);
      await stream.stop().catch(() => undefined);
    }
    if (failure) throw failure;
    return { state: 'STOPPED', position: committed.position, rowsPerTable: { ...committed.rowsPerTable } };
  }
}
