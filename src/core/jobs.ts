import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { sql, type ExpressionBuilder } from 'kysely';
import type { Executor, Store } from './db/database.ts';
import type { Database } from './db/schema.ts';
import { now } from './db/database.ts';

export type JobHandler = (payload: unknown, job: { id: string; attempts: number }) => Promise<void>;

export interface EnqueueOptions {
  /** When the job may run first; now by default. */
  runAt?: Date;
  maxAttempts?: number;
  /**
   * Jobs of one group run one at a time, in the order they are due (a webhook's deliveries): a job is not
   * claimed while another of its group runs under a live lease.
   */
  group?: string;
}

export interface RegisterOptions {
  /**
   * Jobs of this type run in a lane of their own, up to this many at once per process (webhook deliveries:
   * one slow receiver must not hold the others). Without it, a type shares the default lane, one job at a time.
   */
  concurrency?: number;
}

type ClaimedJob = { id: string; type: string; payload: string; attempts: number; maxAttempts: number; groupKey: string | null };

interface Lane {
  limit: number;
  active: number;
}

const DEFAULT_LANE = 'default';
/** Due jobs a PostgreSQL claim looks at before it gives up (another claimer took them meanwhile). */
const CANDIDATES = 8;

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
 * Jobs run in lanes: the default one runs one job at a time per process; a type registered with a
 * `concurrency` has a lane of its own that runs up to that many at once. Jobs enqueued with a `group` run
 * one at a time, in the order they are due, across processes (see `claim`).
 */
export class JobQueue {
  private readonly handlers = new Map<string, JobHandler>();
  /** Each type's lane, and each lane's bound and jobs running in this process. */
  private readonly laneOf = new Map<string, string>();
  private readonly lanes = new Map<string, Lane>([[DEFAULT_LANE, { limit: 1, active: 0 }]]);
  /** Groups with a job running in this process. */
  private readonly busyGroups = new Set<string>();
  /** Jobs running in this process. */
  private readonly inFlight = new Set<Promise<void>>();
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

  register(type: string, handler: JobHandler, options: RegisterOptions = {}): void {
    this.handlers.set(type, handler);
    if (options.concurrency !== undefined) {
      this.laneOf.set(type, type);
      this.lanes.set(type, { limit: Math.max(1, options.concurrency), active: 0 });
    } else this.laneOf.set(type, DEFAULT_LANE);
  }

  /** Adds a job; pass the transaction of the write it belongs to so that both land or neither does. */
  async enqueue(db: Executor, type: string, payload: unknown, options: EnqueueOptions = {}): Promise<string> {
    const [id] = await this.enqueueEach(db, type, [payload], options);
    return id;
  }

  /**
   * Adds a job for each payload (each tried on its own, as if enqueued one by one), in as few statements as
   * SQLite's bound on a statement's values allows; in the caller's transaction as enqueue is.
   */
  async enqueueEach(db: Executor, type: string, payloads: unknown[], options: EnqueueOptions = {}): Promise<string[]> {
    const runAt = (options.runAt ?? new Date()).toISOString();
    const createdAt = now();
    const rows = payloads.map((payload) => ({
      id: randomUUID(),
      type,
      payload: JSON.stringify(payload ?? null),
      state: 'queued',
      runAt,
      attempts: 0,
      maxAttempts: options.maxAttempts ?? 5,
      lockedBy: null,
      lockedUntil: null,
      lastError: null,
      groupKey: options.group ?? null,
      createdAt,
      finishedAt: null,
    }));
    // 13 values a row: 2,000 rows stay under SQLite's 32,766 bound values a statement.
    for (let i = 0; i < rows.length; i += 2000)
      await db
        .insertInto('jobs')
        .values(rows.slice(i, i + 2000))
        .execute();
    if (rows.length > 0) this.poke();
    return rows.map((row) => row.id);
  }

  /**
   * Claims the next due job of a registered type (of `types`, by default all), or undefined. A job of a group
   * with a job running (in this process, or under a live lease anywhere) is passed over.
   */
  async claim(types: string[] = [...this.handlers.keys()]): Promise<ClaimedJob | undefined> {
    if (types.length === 0) return undefined;
    const at = now();
    const lockedUntil = new Date(Date.now() + this.leaseMs).toISOString();
    const busy = [...this.busyGroups];
    const claimable = (eb: ExpressionBuilder<Database, 'jobs'>) =>
      eb.or([
        eb.and([eb('state', '=', 'queued'), eb('runAt', '<=', at)]),
        eb.and([eb('state', '=', 'running'), eb('lockedUntil', '<', at)]),
      ]);
    // No job of its group runs under a live lease (the job's own lapsed lease does not count).
    const groupFree = (eb: ExpressionBuilder<Database, 'jobs'>) =>
      eb.or([
        eb('groupKey', 'is', null),
        eb.not(
          eb.exists(
            eb
              .selectFrom('jobs as other')
              .select('other.id')
              .whereRef('other.groupKey', '=', 'jobs.groupKey')
              .where('other.state', '=', 'running')
              .where('other.lockedUntil', '>=', at),
          ),
        ),
      ]);
    const due = (db: Executor, limit: number) =>
      db
        .selectFrom('jobs')
        .select('id')
        .where('type', 'in', types)
        .where(claimable)
        .where((eb) => (busy.length > 0 ? eb.or([eb('groupKey', 'is', null), eb('groupKey', 'not in', busy)]) : eb.lit(true)))
        .where(groupFree)
        .orderBy('runAt')
        .limit(limit);
    const take = (db: Executor, id: string | ReturnType<typeof due>) =>
      db
        .updateTable('jobs')
        .set((eb) => ({ state: 'running', lockedBy: this.workerId, lockedUntil, attempts: eb('attempts', '+', 1) }))
        .where('id', '=', id)
        // Re-checked on the row itself, so that two claimers racing for it (or for its group) cannot both win.
        .where(claimable)
        .where(groupFree)
        .returning(['id', 'type', 'payload', 'attempts', 'maxAttempts', 'groupKey'])
        .executeTakeFirst();
    // SQLite: one statement, and writes are serialised.
    if (this.store.dialect !== 'postgres') return take(this.store.db, due(this.store.db, 1));
    // PostgreSQL: two claimers' statements may each see no running job of a group, and a SKIP LOCKED look
    // may pass over a group's first job that another claimer looks at. So: due jobs are looked at unlocked;
    // a grouped one is claimed holding its group's advisory lock (to the commit) as the group's first due job,
    // re-checked in a statement of its own (its snapshot taken after any earlier holder committed). A group's
    // jobs are so claimed one at a time, in order, across processes. A claimer holds at most the row it
    // claimed and never waits for a lock while holding another's: no deadlock.
    return this.store.db.transaction().execute(async (trx) => {
      for (const candidate of await due(trx, CANDIDATES).select('groupKey').execute()) {
        if (candidate.groupKey === null) {
          const claimed = await take(trx, candidate.id);
          if (claimed) return claimed;
          continue;
        }
        const { rows } = await sql<{ locked: boolean }>`
          select pg_try_advisory_xact_lock(hashtext(${`dpc job group:${candidate.groupKey}`})) as locked`.execute(trx);
        if (!rows[0]?.locked) continue;
        const first = trx
          .selectFrom('jobs')
          .select('id')
          .where('groupKey', '=', candidate.groupKey)
          .where('type', 'in', types)
          .where(claimable)
          .orderBy('runAt')
          .limit(1);
        const claimed = await take(trx, first);
        if (claimed) return claimed;
      }
      return undefined;
    });
  }

  /** The types whose lane has room for one more job in this process. */
  private typesWithRoom(): string[] {
    return [...this.handlers.keys()].filter((type) => {
      const lane = this.lanes.get(this.laneOf.get(type) ?? DEFAULT_LANE)!;
      return lane.active < lane.limit;
    });
  }

  /**
   * Claims due jobs while their lanes have room and starts them (not waiting for them); how many. Each job
   * that ends looks for more.
   */
  private async pump(): Promise<number> {
    let count = 0;
    for (;;) {
      if (this.stopping) return count;
      const types = this.typesWithRoom();
      if (types.length === 0) return count;
      const job = await this.claim(types);
      if (!job) return count;
      const lane = this.lanes.get(this.laneOf.get(job.type) ?? DEFAULT_LANE)!;
      lane.active += 1;
      if (job.groupKey !== null) this.busyGroups.add(job.groupKey);
      const running: Promise<void> = this.run(job)
        .catch((error) => this.settings.log?.error({ err: error, jobId: job.id }, 'job run failed'))
        .finally(() => {
          lane.active -= 1;
          if (job.groupKey !== null) this.busyGroups.delete(job.groupKey);
          this.inFlight.delete(running);
          this.poke();
        });
      this.inFlight.add(running);
      count += 1;
    }
  }

  /** Runs due jobs until none is left (and none of this process runs); how many it started. */
  async drain(): Promise<number> {
    let count = 0;
    for (;;) {
      count += await this.pump();
      if (this.inFlight.size === 0 || this.stopping) {
        await Promise.all(this.inFlight);
        return count;
      }
      await Promise.race(this.inFlight);
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
    await Promise.all(this.inFlight);
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
      // Starts what is due and returns: a job that ends pokes for more, so a slow one holds only its lane slot.
      this.running = this.pump()
        .then(() => undefined)
        .catch((error) => this.settings.log?.error({ err: error }, 'job queue poll failed'))
        .finally(() => {
          this.running = undefined;
          if (!this.stopping) this.schedule(this.pokedWhileRunning ? 0 : this.pollIntervalMs);
        });
    }, delay);
    this.timer.unref();
  }

  private async run(job: ClaimedJob): Promise<void> {
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
