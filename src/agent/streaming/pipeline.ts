/**
 * One streaming pipeline's run on this agent: PostgreSQL change data capture into a change target
 * (target.ts: files in an object store, or warehouse tables).
 *
 * - First start: a publication for the tables and a replication slot; with `snapshot.mode` initial (the
 *   default) the tables' rows as of the slot's creation are written first (op `snapshot`).
 * - Then the change stream, in batches of whole transactions (batcher.ts): each batch is written to the
 *   target, then the position is committed to the state folder (fsync'd), then the slot is acknowledged. A
 *   crash anywhere replays from the committed position; what the target holds after it is removed first (or,
 *   for a target that commits its own position, the run resumes from that), so the target holds each change once.
 * - While nothing is in hand, keepalives are acknowledged too: the slot moves on when only other tables change.
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
import { Batcher } from './batcher.ts';
import { bigIntToLsn, lsnKey, lsnToBigInt } from './lsn.ts';
import { PostgresSource, type TableName } from './postgres.ts';
import { loadState, saveState, type StreamingState } from './state.ts';
import { tableKey, type ChangeEvent, type ChangeTarget } from './target.ts';

export { tableKey, type ChangeEvent } from './target.ts';

export interface RunSettings {
  pipelineId: string;
  tables: TableName[];
  advancedProperties: Record<string, string>;
  stateDir: string;
  source: PostgresSource;
  target: ChangeTarget;
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

/** A transaction as the stream delivers it: begun, its changes, committed. */
interface OpenTransaction {
  xid: number;
  commitTime: string;
  commitMs: number;
  events: ChangeEvent[];
}

export async function runPostgresPipeline(settings: RunSettings): Promise<StreamingRunEnd> {
  const { source, target, pipelineId, tables, signal } = settings;
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
    await target.resetSnapshot(tables);
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
      const lsn = await source.createSlot(slot);
      await target.streamFrom(lsn, lsnKey(lsn), rowsPerTable);
      await start(lsn, true);
    } else {
      const lsn = await source.createSlot(slot, async (client, consistentPoint) => {
        await start(consistentPoint, false);
        settings.report(progress('snapshot', 0));
        await snapshotTables(client, consistentPoint);
      });
      await target.streamFrom(lsn, lsnKey(lsn), state!.rowsPerTable);
      state!.snapshot = 'done';
      state!.position = lsn;
      await saveState(settings.stateDir, pipelineId, state!);
    }
    settings.log('replication slot created', { slot, position: state!.position, snapshot: mode });
  }

  async function snapshotTables(client: pg.Client, lsn: string): Promise<void> {
    const commitTime = new Date().toISOString();
    for (const { schema, table } of tables) {
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
        await target.writeSnapshot({ schema, table }, lsnKey(lsn), part, events);
        const key = tableKey(schema, table);
        state!.rowsPerTable[key] = (state!.rowsPerTable[key] ?? 0) + rows.length;
        settings.report(progress('snapshot', 0));
      }
    }
  }

  const current: StreamingState = state!;
  // What the target wrote after the committed position was never committed: removed, the replay writes it again.
  // A target that commits its own position with its writes (the warehouse) may be one batch ahead.
  const ahead = await target.recover(tables, lsnKey(current.position), settings.log);
  if (ahead) {
    settings.log('the target holds a later position than the state folder: resuming from it', { position: ahead.position });
    current.position = ahead.position;
    current.rowsPerTable = ahead.rowsPerTable;
    await saveState(settings.stateDir, pipelineId, current);
  }

  settings.report(progress('streaming', 0));
  // After a crash the source may not yet have noticed that the old connection on the slot is gone.
  await source.waitForSlotIdle(slot, 30_000);
  return streamChanges(current);

  async function streamChanges(committed: StreamingState): Promise<StreamingRunEnd> {
    let open: OpenTransaction | undefined;
    let failure: Error | undefined;
    let finish: () => void = () => undefined;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    /** The furthest position acknowledged to the slot. */
    let acknowledged = lsnToBigInt(committed.position);
    const acknowledge = async (lsn: string) => {
      const value = lsnToBigInt(lsn);
      if (value < acknowledged) return;
      acknowledged = value;
      await stream.acknowledge(bigIntToLsn(value));
    };
    const batcher = new Batcher({
      pipelineId,
      stateDir: settings.stateDir,
      target,
      committed,
      committedKey: lsnKey(committed.position),
      batchChanges: settings.batchChanges ?? 5_000,
      batchMs: settings.batchMs ?? 200,
      report: (lagSeconds) => settings.report(progress('streaming', lagSeconds)),
      acknowledge,
      onFailure(error) {
        failure ??= error;
        finish();
      },
    });

    function onMessage(lsn: string, message: Pgoutput.Message): Promise<void> | void {
      switch (message.tag) {
        case 'begin': {
          const commitMs = Number((message.commitTime as unknown as bigint) / 1000n);
          open = { xid: message.xid, commitTime: new Date(commitMs).toISOString(), commitMs, events: [] };
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
          for (const event of transaction.events) event.commitLsn = end;
          // Already written before a restart (the slot hands it again until its acknowledgement arrived): skipped.
          return batcher.add({ position: end, key: lsnKey(end), commitMs: transaction.commitMs, events: transaction.events });
        }
        default:
          return;
      }
    }

    const stream = settings.source.stream(slot, publication, committed.position, {
      onMessage,
      onKeepalive(lsn, shouldRespond, drained) {
        if (drained && !open && batcher.idle) {
          batcher.caughtUp();
          // Everything the source sent before this keepalive is written and committed: the slot may release
          // WAL up to it, also when only other tables (or other databases) change.
          void acknowledge(bigIntToLsn(lsnToBigInt(lsn))).catch(() => undefined);
        } else if (shouldRespond) void acknowledge(committed.position).catch(() => undefined);
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
    const onAbort = () => finish();
    signal.addEventListener('abort', onAbort, { once: true });
    // A stop that came while the run was getting ready.
    if (signal.aborted) finish();
    try {
      await finished;
      // Stopping: write what is complete; a transaction still open is read again on the next start.
      if (!failure) await batcher.drain();
    } finally {
      batcher.close();
      signal.removeEventListener('abort', onAbort);
      await stream.stop().catch(() => undefined);
    }
    if (failure) throw failure;
    return { state: 'STOPPED', position: committed.position, rowsPerTable: { ...committed.rowsPerTable } };
  }
}
