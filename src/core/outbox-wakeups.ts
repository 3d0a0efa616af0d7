import type { EventEmitter } from 'node:events';
import pg from 'pg';
import type { FastifyBaseLogger } from 'fastify';
import { EVENTS_CHANNEL, localEmits } from './outbox.ts';

/** Told the keys (account ids, agent ids: whatever the channel carries) that may have news, or 'all'. */
export type WakeListener = (keys: string[] | 'all') => void;

/**
 * Wake-ups on a PostgreSQL channel (LISTEN; writers notify `channel` with keys, comma-separated, when or
 * after they commit, heard by every server process) or, on SQLite, from `local`'s `localEvent` events
 * (writers of this process emit an array of keys). OutboxWakeups (below) describes how in full; the agents area wakes waiting
 * polls for work with one too.
 */
export class ChannelWakeups {
  private readonly listeners = new Set<WakeListener>();
  private client: pg.Client | undefined;
  private retry: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly onLocal = (keys: string[]) => this.wake(keys);

  constructor(
    private readonly databaseUrl: string | undefined,
    private readonly log: Pick<FastifyBaseLogger, 'warn'>,
    private readonly channel: string,
    private readonly local: EventEmitter,
    private readonly localEvent = 'emitted',
  ) {}

  subscribe(listener: WakeListener): () => void {
    this.listeners.add(listener);
    if (this.listeners.size === 1) this.open();
    return () => {
      this.listeners.delete(listener);
    };
  }

  private wake(keys: string[] | 'all'): void {
    for (const listener of this.listeners) listener(keys);
  }

  private open(): void {
    if (this.closed) return;
    if (!this.databaseUrl) {
      if (this.local.listeners(this.localEvent).includes(this.onLocal)) return;
      this.local.on(this.localEvent, this.onLocal);
      return;
    }
    if (this.client || this.retry) return;
    const client = new pg.Client({ connectionString: this.databaseUrl });
    this.client = client;
    const lost = (error: Error) => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.log.warn(
        { err: error, channel: this.channel },
        'lost the connection that listens for wake-ups; listening again in 1 s',
      );
      this.retry = setTimeout(() => {
        this.retry = undefined;
        this.open();
      }, 1000);
      this.retry.unref();
    };
    client.on('error', lost);
    client.on('end', () => lost(new Error('connection ended')));
    client.on('notification', (message) => {
      if (message.channel === this.channel && message.payload) this.wake(message.payload.split(','));
    });
    client
      .connect()
      .then(() => client.query(`listen ${this.channel}`))
      // Whatever was notified before listening (or while the last connection was down) is not heard: look everywhere.
      .then(() => this.wake('all'))
      .catch((error: Error) => lost(error));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.local.off(this.localEvent, this.onLocal);
    if (this.retry) clearTimeout(this.retry);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}

/**
 * Tells readers of the outbox (the event feed, webhook fan-out) that an account may have new events.
 * On PostgreSQL, a connection of its own LISTENs on the channel every process notifies after it committed
 * events (the accounts of one turn's commits, comma-separated), whichever server process wrote; after that connection is lost and made again, every account is
 * woken ('all'), since notifications sent meanwhile are gone. On SQLite, which has no NOTIFY, emits of this
 * process wake at once and readers poll for the others' (see pollMs of each reader). A wake-up is only a
 * hint: readers always read the outbox itself, from their own cursor, so one missed or repeated costs a
 * delay or a query, never an event.
 *
 * The connection is opened when the first listener subscribes, so a process nobody follows holds none.
 */
export class OutboxWakeups extends ChannelWakeups {
  constructor(databaseUrl: string | undefined, log: Pick<FastifyBaseLogger, 'warn'>) {
    super(databaseUrl, log, EVENTS_CHANNEL, localEmits, 'committed');
  }
}
