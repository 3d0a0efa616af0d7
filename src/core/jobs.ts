import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Executor, Store } from './db/database.ts';
import { now } from './db/database.ts';

export type JobHandler = (payload: unknown, job: { id: string; attempts: number }) => Promise<void>;

export interface EnqueueOptions {
  /** When the job may run first; now by default. */
  runAt?: Date;
  maxAttempts?: number;
}

interface QueueSettings {
  pollIntervalMs?: number;
  /** How long a claimed job stays with its worker before another may take it over (the worker died). */
  leaseMs?: number;
  log?: Pick<FastifyBaseLogger, 'error' | 'warn'>;
  /** Told how each run of a job ended (for metrics). */
  onOutcome?: (type: string, outcome: 'done' | 'retried' | 'failed') => void;
}

/**
 * A durable job queue in the store's own `jobs` table. A job is claimed by one worker at a time,
 * across every server process sharing the store: on PostgreSQL with FOR UPDATE SKIP LOCKED, on SQLite
 * because writes are serialised. A failed job is retried with backoff until maxAttempts; a running job's
 * lease is renewed while its worker lives, and a job whose worker vanished is taken over when it runs out.
 */
export class JobQueue {
  private readonly handlers = new Map<string, JobHandler>();
  private readonly workerId = randomUUID();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopping = false;
  /** Poked during a drain: what it was poked for may have committed after the drain's last look. */
  private pokedWhileRunning = false;
  private readonly pollIntervalMs: number;
  private readonly leaseMs: number;

  constructor(
    private readonly store: Pick<Store, 'db' | 'dialect'>,
    private readonly settings: QueueSettings = {},
  ) {
    this.pollIntervalMs = settings.pollIntervalMs ?? 500;
    this.leaseMs = settings.leaseMs ?? 5 * 60_000;
  }

  register(type: string, handler: JobHandler): void {
    this.handlers.set(type, handler);
  }

  /** Adds a job; pass the transaction of the write it belongs to so that both land or neither does. */
  async enqueue(db: Executor, type: string, payload: unknown, options: EnqueueOptions = {}): Promise<string> {
    const id = randomUUID();
    await db
      .insertInto('jobs')
      .values({
        id,
        type,
        payload: JSON.stringify(payload ?? null),
        state: 'queued',
        runAt: (options.runAt ?? new Date()).toISOString(),
        attempts: 0,
        maxAttempts: options.maxAttempts ?? 5,
        lockedBy: null,
        lockedUntil: null,
        lastError: null,
        createdAt: now(),
        finishedAt: null,
      })
      .execute();
    this.poke();
    return id;
  }

  /** Claims the next due job of a registered type, or undefined. */
  async claim(): Promise<{ id: string; type: string; payload: string; attempts: number; maxAttempts: number } | undefined> {
    const types = [...this.handlers.keys()];
    if (types.length === 0) return undefined;
    const at = now();
    const lockedUntil = new Date(Date.now() + this.leaseMs).toISOString();
    const due = this.store.db
      .selectFrom('jobs')
      .select('id')
      .where('type', 'in', types)
      .where((eb) =>
        eb.or([
          eb.and([eb('state', '=', 'queued'), eb('runAt', '<=', at)]),
          eb.and([eb('state', '=', 'running'), eb('lockedUntil', '<', at)]),
        ]),
      )
      .orderBy('runAt')
      .limit(1);
    const claimed = await this.store.db
      .updateTable('jobs')
      .set((eb) => ({ state: 'running', lockedBy: this.workerId, lockedUntil, attempts: eb('attempts', '+', 1) }))
      .where('id', '=', this.store.dialect === 'postgres' ? due.forUpdate().skipLocked() : due)
      // Re-checked on the row itself, so that two claimers racing for it cannot both win.
      .where((eb) => eb.or([eb('state', '=', 'queued'), eb.and([eb('state', '=', 'running'), eb('lockedUntil', '<', at)])]))
      .returning(['id', 'type', 'payload', 'attempts', 'maxAttempts'])
      .executeTakeFirst();
    return claimed;
  }

  /** Runs due jobs until none is left. */
  async drain(): Promise<number> {
    let count = 0;
    for (;;) {
      if (this.stopping) return count;
      const job = await this.claim();
      if (!job) return count;
      await this.run(job);
      count += 1;
    }
  }

  start(): void {
    this.stopping = false;
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /**
   * Looks for due jobs now rather than at the next poll. `enqueue` pokes by itself, but a job enqueued in a
   * transaction is seen only once that commits: call it again after the commit. A poke during a drain makes
   * the next look follow at once.
   */
  poke(): void {
    if (!this.timer || this.stopping) return;
    if (this.running) this.pokedWhileRunning = true;
    else this.schedule(0);
  }

  private schedule(delay: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.pokedWhileRunning = false;
      this.running = this.drain()
        .then(() => undefined)
        .catch((error) => this.settings.log?.error({ err: error }, 'job queue poll failed'))
        .finally(() => {
          this.running = undefined;
          if (!this.stopping) this.schedule(this.pokedWhileRunning ? 0 : this.pollIntervalMs);
        });
    }, delay);
    this.timer.unref();
  }

  private async run(job: { id: string; type: string; payload: string; attempts: number; maxAttempts: number }): Promise<void> {
    const handler = this.handlers.get(job.type)!;
    // A live worker keeps its lease however long the job takes: only a worker that died lets it lapse.
    const renewal = setInterval(() => {
      this.store.db
        .updateTable('jobs')
        .set({ lockedUntil: new Date(Date.now() + this.leaseMs).toISOString() })
        .where('id', '=', job.id)
        .where('lockedBy', '=', this.workerId)
        .execute()
        .catch((error: unknown) => this.settings.log?.warn({ jobId: job.id, err: error }, 'could not renew a job lease'));
    }, this.leaseMs / 3).unref();
    try {
      await handler(JSON.parse(job.payload), { id: job.id, attempts: job.attempts });
      await this.finish(job.id, { state: 'done', lastError: null });
      this.settings.onOutcome?.(job.type, 'done');
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.settings.log?.warn({ jobId: job.id, type: job.type, attempts: job.attempts, err: error }, 'job failed');
      if (job.attempts >= job.maxAttempts) {
        await this.finish(job.id, { state: 'failed', lastError: message });
        this.settings.onOutcome?.(job.type, 'failed');
      } else {
        const backoffMs = Math.min(60_000, 1000 * 2 ** (job.attempts - 1));
        await this.store.db
          .updateTable('jobs')
          .set({
            state: 'queued',
            lockedBy: null,
            lockedUntil: null,
            lastError: message,
            runAt: new Date(Date.now() + backoffMs).toISOString(),
          })
          .where('id', '=', job.id)
          .where('lockedBy', '=', this.workerId)
          .execute();
        this.settings.onOutcome?.(job.type, 'retried');
      }
    } finally {
      clearInterval(renewal);
    }
  }

  private async finish(id: string, outcome: { state: 'done' | 'failed'; lastError: string | null }): Promise<void> {
    await this.store.db
      .updateTable('jobs')
      .set({ ...outcome, lockedBy: null, lockedUntil: null, finishedAt: now() })
      .where('id', '=', id)
      .where('lockedBy', '=', this.workerId)
      .execute();
  }

  /** Jobs waiting or running, by state. */
  async depth(): Promise<{ state: string; count: number }[]> {
    const rows = await this.store.db
      .selectFrom('jobs')
      .select(['state', (eb) => eb.fn.countAll<number>().as('count')])
      .where('state', 'in', ['queued', 'running'])
      .groupBy('state')
      .execute();
    return rows.map((row) => ({ state: row.state, count: Number(row.count) }));
  }
}
