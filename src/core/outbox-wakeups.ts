import pg from 'pg';
import type { FastifyBaseLogger } from 'fastify';
import { EVENTS_CHANNEL, localEmits } from './outbox.ts';

export type WakeListener = (accountIds: string[] | 'all') => void;

/**
 * Tells readers of the outbox (the event feed, webhook fan-out) that an account may have new events.
 * On PostgreSQL, a connection of its own LISTENs on the channel every process notifies after it committed
 * events, whichever server process wrote; after that connection is lost and made again, every account is
 * woken ('all'), since notifications sent meanwhile are gone. On SQLite, which has no NOTIFY, emits of this
 * process wake at once and readers poll for the others' (see pollMs of each reader). A wake-up is only a
 * hint: readers always read the outbox itself, from their own cursor, so one missed or repeated costs a
 * delay or a query, never an event.
 *
 * The connection is opened when the first listener subscribes, so a process nobody follows holds none.
 */
export class OutboxWakeups {
  private readonly listeners = new Set<WakeListener>();
  private client: pg.Client | undefined;
  private retry: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly onLocal = (accountIds: string[]) => this.wake(accountIds);

  constructor(
    private readonly databaseUrl: string | undefined,
    private readonly log: Pick<FastifyBaseLogger, 'warn'>,
  ) {}

  subscribe(listener: WakeListener): () => void {
    this.listeners.add(listener);
    if (this.listeners.size === 1) this.open();
    return () => {
      this.listeners.delete(listener);
    };
  }

  private wake(accountIds: string[] | 'all'): void {
    for (const listener of this.listeners) listener(accountIds);
  }

  private open(): void {
    if (this.closed) return;
    if (!this.databaseUrl) {
      if (localEmits.listeners('committed').includes(this.onLocal)) return;
      localEmits.on('committed', this.onLocal);
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
      this.log.warn({ err: error }, 'lost the connection that listens for events; listening again in 1 s');
      this.retry = setTimeout(() => {
        this.retry = undefined;
        this.open();
      }, 1000);
      this.retry.unref();
    };
    client.on('error', lost);
    client.on('end', () => lost(new Error('connection ended')));
    client.on('notification', (message) => {
      // The accounts of the commits of one turn of the notifying process, comma-separated.
      if (message.channel === EVENTS_CHANNEL && message.payload) this.wake(message.payload.split(','));
    });
    client
      .connect()
      .then(() => client.query(`listen ${EVENTS_CHANNEL}`))
      // Whatever was notified before listening (or while the last connection was down) is not heard: look everywhere.
      .then(() => this.wake('all'))
      .catch((error: Error) => lost(error));
  }

  async close(): Promise<void> {
    this.closed = true;
    localEmits.off('committed', this.onLocal);
    if (this.retry) clearTimeout(this.retry);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
