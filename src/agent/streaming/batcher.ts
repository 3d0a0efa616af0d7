/**
 * The batches of a streaming run, whatever the source (PostgreSQL or MySQL) and the target: committed
 * transactions are gathered into batches of up to `batchChanges` changes or `batchMs` old; each batch is
 * written to the target whole, then its position committed to the state folder (fsync'd), then (PostgreSQL)
 * the slot acknowledged — in that order, so that a crash anywhere replays from the committed position. The
 * stream reads on while one batch is written and waits when a second is due. Progress goes out at most
 * once a second; one held back is sent when its second is up, so the last state is always told.
 */
import type { StreamingState } from './state.ts';
import { saveState } from './state.ts';
import { keyValue, tableKey, type ChangeTarget, type Transaction } from './target.ts';

export interface BatcherSettings {
  pipelineId: string;
  stateDir: string;
  target: ChangeTarget;
  /** The committed state: its position and row counts move as batches are written. */
  committed: StreamingState;
  /** The committed position as 16 hex digits. */
  committedKey: string;
  batchChanges: number;
  batchMs: number;
  /** Sends a progress report (already at most one a second). */
  report(lagSeconds: number): void;
  /** After the position is committed: tells the source it may release everything up to it. */
  acknowledge?(position: string): Promise<void>;
  /** A write failed: the run ends (nothing more is written or committed). */
  onFailure(error: Error): void;
  /** Asked on each tick while no batch waits: whether the source has nothing in hand (lag is then 0). */
  quiet?(): boolean;
}

export class Batcher {
  private batch: Transaction[] = [];
  private size = 0;
  private started = 0;
  private pending = 0;
  private writing: Promise<void> = Promise.resolve();
  private failed = false;
  private lagSeconds = 0;
  private lastReport = 0;
  private trailing: NodeJS.Timeout | undefined;
  private readonly timer: NodeJS.Timeout;
  /** The committed position as a number (batches at or before it are replays and are skipped). */
  private committedKey: bigint;

  constructor(private readonly settings: BatcherSettings) {
    this.committedKey = keyValue(settings.committedKey);
    // A batch younger than batchMs is written when it comes of age, also when no more changes arrive.
    this.timer = setInterval(
      () => {
        if (this.batch.length > 0 && Date.now() - this.started >= settings.batchMs) this.schedule();
        else if (this.batch.length === 0 && this.lagSeconds !== 0 && settings.quiet?.()) this.caughtUp();
      },
      Math.max(20, Math.floor(settings.batchMs / 2)),
    );
  }

  /** Nothing waits to be written and nothing is being written: every change received is committed. */
  get idle(): boolean {
    return this.batch.length === 0 && this.pending === 0 && !this.failed;
  }

  /**
   * A committed transaction of the source (its events' commitLsn set). One at or before the committed
   * position is a replay after a restart and is skipped. Answers a promise when the stream should wait.
   */
  add(transaction: Transaction): Promise<void> | undefined {
    if (keyValue(transaction.key) <= this.committedKey) return undefined;
    if (this.batch.length === 0) this.started = Date.now();
    this.batch.push(transaction);
    this.size += transaction.events.length;
    if (this.size >= this.settings.batchChanges || Date.now() - this.started >= this.settings.batchMs) {
      this.schedule();
      return this.pending > 1 ? this.writing : undefined;
    }
    return undefined;
  }

  /** The source says it has sent everything: lag is 0. */
  caughtUp(): void {
    if (this.batch.length > 0) return;
    this.lagSeconds = 0;
    this.report();
  }

  /** Writes what is in hand and waits for every write (stopping). */
  async drain(): Promise<void> {
    this.schedule();
    await this.writing;
  }

  close(): void {
    clearInterval(this.timer);
    clearTimeout(this.trailing);
  }

  private report(): void {
    const wait = this.lastReport + 1000 - Date.now();
    if (wait > 0) {
      this.trailing ??= setTimeout(() => {
        this.trailing = undefined;
        this.report();
      }, wait);
      return;
    }
    this.lastReport = Date.now();
    this.settings.report(this.lagSeconds);
  }

  private schedule(): void {
    this.pending += 1;
    this.writing = this.writing
      .then(() => this.flush())
      .catch((error: Error) => {
        this.failed = true;
        this.settings.onFailure(error);
      })
      .finally(() => (this.pending -= 1));
  }

  /** Writes the batch to the target, commits the position, acknowledges the source: in that order. */
  private async flush(): Promise<void> {
    // After a failed write nothing more is written or committed: the next start replays from the committed position.
    if (this.batch.length === 0 || this.failed) return;
    const transactions = this.batch;
    this.batch = [];
    this.size = 0;
    const { committed } = this.settings;
    const rowsPerTable = { ...committed.rowsPerTable };
    for (const transaction of transactions) {
      for (const event of transaction.events) {
        const name = tableKey(event.schema, event.table);
        rowsPerTable[name] = (rowsPerTable[name] ?? 0) + 1;
      }
    }
    const last = transactions.at(-1)!;
    await this.settings.target.write({ transactions, position: last.position, key: last.key, rowsPerTable });
    committed.position = last.position;
    committed.rowsPerTable = rowsPerTable;
    await saveState(this.settings.stateDir, this.settings.pipelineId, committed);
    this.committedKey = keyValue(last.key);
    await this.settings.acknowledge?.(last.position);
    this.lagSeconds = Math.max(0, (Date.now() - last.commitMs) / 1000);
    this.report();
  }
}
