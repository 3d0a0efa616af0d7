import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../../core/db/database.ts';
import { runDueSchedules } from '../schedules/repository.ts';
import { sweepExecutions } from './lifecycle.ts';

/**
 * Each server process (with background work on) looks every interval for runs whose agent is out of
 * contact and for due schedules. Not a JobQueue job: it is periodic, not one-off work, and what must
 * happen once across instances is decided by compare-and-set updates on the rows themselves.
 */
export class ExecutionTicker {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly settings: {
      intervalMs: number;
      lostAfterMs: number;
      catchUpMs: number;
      log: Pick<FastifyBaseLogger, 'error'>;
    },
  ) {}

  start(): void {
    this.stopped = false;
    this.schedule();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /** One look; the tests call it to avoid waiting for the timer. */
  async tick(): Promise<void> {
    await sweepExecutions(this.db, this.settings.lostAfterMs);
    await runDueSchedules(this.db, this.settings.catchUpMs);
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.running = this.tick()
        .catch((error) => this.settings.log.error({ err: error }, 'execution ticker failed'))
        .finally(() => {
          this.running = undefined;
          if (!this.stopped) this.schedule();
        });
    }, this.settings.intervalMs);
    this.timer.unref();
  }
}
