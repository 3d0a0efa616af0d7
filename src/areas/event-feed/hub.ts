import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../../core/db/database.ts';
import { eventsAfter, matches, type EventFilter, type StoredEvent } from '../../core/outbox.ts';
import type { OutboxWakeups } from '../../core/outbox-wakeups.ts';

/** Events of an account kept in memory for its subscribers: a subscriber this far behind reads the store itself. */
const BUFFERED = 2000;
/** Events read from the store at once. */
const BATCH = 500;

/** One SSE client: its account, filter, and the id of the last event it was sent (or skipped). */
class Subscriber {
  private pumping = false;
  private again = false;
  closed = false;

  constructor(
    readonly feed: AccountFeed,
    readonly response: ServerResponse,
    readonly filter: EventFilter,
    public cursor: number,
  ) {}

  /** Sends whatever the account's feed knows past the cursor, in order; a second call while busy runs once more after. */
  async pump(): Promise<void> {
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.again = false;
        while (!this.closed && this.cursor < this.feed.head) {
          const batch = this.feed.buffered(this.cursor) ?? (await this.feed.read(this.cursor));
          if (batch.length === 0) break;
          let text = '';
          for (const event of batch) {
            if (event.id > this.feed.head) break;
            if (matches(this.filter, event)) text += frame(event);
            this.cursor = event.id;
          }
          if (text && !this.response.write(text)) await this.drained();
        }
      } while (this.again && !this.closed);
    } catch (error) {
      this.feed.log.warn({ err: error }, 'an event stream failed; closing it');
      this.response.destroy();
    } finally {
      this.pumping = false;
    }
  }

  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.response.off('drain', done);
        this.response.off('close', done);
        resolve();
      };
      this.response.on('drain', done);
      this.response.on('close', done);
    });
  }
}

/** An event as Server-Sent Events frame it: its id, type and JSON, ended by a blank line. */
export function frame(event: StoredEvent): string {
  const data = JSON.stringify({
    id: event.id,
    type: event.type,
    occurredAt: event.occurredAt,
    projectId: event.projectId,
    subject: event.subject,
    data: event.data,
  });
  return `id: ${event.id}\nevent: ${event.type}\ndata: ${data}\n\n`;
}

/** The subscribers of one account in this process, and the account's recent events, read once for all of them. */
class AccountFeed {
  /** The last event id read from the store. */
  head: number;
  private buffer: StoredEvent[] = [];
  readonly subscribers = new Set<Subscriber>();
  private reading: Promise<void> | undefined;
  private readAgain = false;

  constructor(
    private readonly db: Db,
    readonly accountId: string,
    readonly log: Pick<FastifyBaseLogger, 'warn'>,
    head: number,
  ) {
    this.head = head;
  }

  /** The buffered events after `cursor`, or undefined when the buffer does not reach back that far. */
  buffered(cursor: number): StoredEvent[] | undefined {
    const first = this.buffer[0]?.id;
    if (first === undefined || cursor < first - 1) return undefined;
    // Ids of an account have no gaps within what was read together in order, so the position is the difference.
    const start = cursor - first + 1;
    if (this.buffer[start - 1] && this.buffer[start - 1].id !== cursor) return undefined;
    return this.buffer.slice(start, start + BATCH);
  }

  read(cursor: number): Promise<StoredEvent[]> {
    return eventsAfter(this.db, this.accountId, cursor, BATCH);
  }

  /** Reads what is new, then lets every subscriber catch up. */
  refresh(): Promise<void> {
    if (this.reading) {
      this.readAgain = true;
      return this.reading;
    }
    this.reading = (async () => {
      try {
        do {
          this.readAgain = false;
          for (;;) {
            const events = await eventsAfter(this.db, this.accountId, this.head, BATCH);
            if (events.length === 0) break;
            // Retention may have removed events in between: the buffer then starts afresh.
            if (this.buffer.length > 0 && events[0].id !== this.head + 1) this.buffer = [];
            this.buffer.push(...events);
            if (this.buffer.length > BUFFERED) this.buffer = this.buffer.slice(-BUFFERED);
            this.head = events.at(-1)!.id;
            if (events.length < BATCH) break;
          }
        } while (this.readAgain);
      } catch (error) {
        this.log.warn({ err: error, accountId: this.accountId }, 'could not read new events');
      } finally {
        this.reading = undefined;
      }
      for (const subscriber of this.subscribers) void subscriber.pump();
    })();
    return this.reading;
  }
}

/**
 * The event streams this process serves. Each account with subscribers is read once per wake-up (a
 * NOTIFY from whichever process committed events, a local emit, or the poll) and its new events are
 * handed to each of its subscribers; a subscriber that is behind (it resumed from an older id) reads the
 * store itself until it reaches what the others see.
 */
export class FeedHub {
  private readonly feeds = new Map<string, AccountFeed>();
  private poll: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;

  constructor(
    private readonly db: Db,
    private readonly wakeups: OutboxWakeups,
    private readonly settings: { pollMs: number; heartbeatMs: number; log: Pick<FastifyBaseLogger, 'warn'> },
  ) {}

  get subscriberCount(): number {
    let count = 0;
    for (const feed of this.feeds.values()) count += feed.subscribers.size;
    return count;
  }

  /** Follows the account's events after `cursor` onto `response` until it closes. `head` is the account's last id now. */
  subscribe(accountId: string, response: ServerResponse, filter: EventFilter, cursor: number, head: number): void {
    this.start();
    let feed = this.feeds.get(accountId);
    if (!feed) {
      feed = new AccountFeed(this.db, accountId, this.settings.log, head);
      this.feeds.set(accountId, feed);
    }
    const subscriber = new Subscriber(feed, response, filter, cursor);
    feed.subscribers.add(subscriber);
    response.on('close', () => {
      subscriber.closed = true;
      feed.subscribers.delete(subscriber);
      if (feed.subscribers.size === 0 && this.feeds.get(accountId) === feed) this.feeds.delete(accountId);
    });
    // A head read before the feed existed may be newer than the feed's: read up to it.
    if (head > feed.head) void feed.refresh();
    else void subscriber.pump();
  }

  private start(): void {
    if (this.poll) return;
    this.unsubscribe = this.wakeups.subscribe((accountIds) => {
      if (accountIds === 'all') for (const feed of this.feeds.values()) void feed.refresh();
      else for (const accountId of accountIds) void this.feeds.get(accountId)?.refresh();
    });
    this.poll = setInterval(() => {
      for (const feed of this.feeds.values()) void feed.refresh();
    }, this.settings.pollMs).unref();
    this.heartbeat = setInterval(() => {
      for (const feed of this.feeds.values())
        for (const subscriber of feed.subscribers) subscriber.response.write(': keep-alive\n\n');
    }, this.settings.heartbeatMs).unref();
  }

  /** Ends every stream (the server is closing); clients resume elsewhere with Last-Event-ID. */
  close(): void {
    if (this.poll) clearInterval(this.poll);
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.poll = undefined;
    this.unsubscribe?.();
    for (const feed of this.feeds.values()) for (const subscriber of feed.subscribers) subscriber.response.end();
    this.feeds.clear();
  }
}
