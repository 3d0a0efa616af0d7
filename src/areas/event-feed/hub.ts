import type { Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import type { Db } from '../../core/db/database.ts';
import { ProblemError } from '../../core/problems.ts';
import { matches, readEvents, type EventFilter, type StoredEvent } from '../../core/outbox.ts';
import type { OutboxWakeups } from '../../core/outbox-wakeups.ts';

/** Events of an account kept in memory for its subscribers: a subscriber this far behind reads the store itself. */
const BUFFERED = 2000;
/** Events read from the store at once. */
const BATCH = 500;

/** One SSE client: its account, filter, and the id of the last event it was sent (or skipped). Kept small: a process holds thousands. */
class Subscriber {
  private pumping = false;
  private again = false;
  closed = false;

  constructor(
    readonly feed: AccountFeed,
    readonly socket: Socket,
    readonly filter: EventFilter,
    public cursor: number,
    /** Who was let in, and until when: the stream ends when that no longer stands (FeedHub's stillValid). */
    readonly access: StreamAccess,
    /** Ids past the cursor that had committed before the client subscribed: not the client's to receive. */
    private before?: Set<number>,
  ) {}

  /** Whether the client may still be sent events; ends the stream when not (its client revoked, its token expired). */
  mayGoOn(): boolean {
    if (this.closed) return false;
    if (this.feed.stillValid(this.access.clientId, this.access.expiresAt)) return true;
    this.closed = true;
    this.socket.end(': the access this stream was opened with has ended (client revoked or token expired)\n\n');
    return false;
  }

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
          const head = this.feed.head;
          // Behind what the feed keeps: the store itself, until it catches up.
          let { events, complete } = this.feed.buffered(this.cursor) ?? (await this.feed.read(this.cursor));
          let text = '';
          for (const event of events) {
            if (event.id > head) {
              complete = true; // everything up to the head was in this batch
              break;
            }
            if (matches(this.filter, event) && !this.before?.has(event.id)) text += frame(event);
            this.cursor = event.id;
          }
          if (this.before && [...this.before].every((id) => id <= this.cursor)) this.before = undefined;
          // Nothing else up to the head: ids are not contiguous, so the cursor moves there.
          if (complete) this.cursor = Math.max(this.cursor, head);
          if (text && !this.mayGoOn()) return;
          if (text && !this.socket.write(text)) await this.drained();
        }
      } while (this.again && !this.closed);
    } catch (error) {
      this.feed.log.warn({ err: error }, 'an event stream failed; closing it');
      this.socket.destroy();
    } finally {
      this.pumping = false;
    }
  }

  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.socket.off('drain', done);
        this.socket.off('close', done);
        resolve();
      };
      this.socket.on('drain', done);
      this.socket.on('close', done);
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

/** The client a stream was opened for and when its token expires (ms since the epoch). */
export interface StreamAccess {
  clientId: string;
  expiresAt: number;
}

/** Some events after a cursor; `complete` when they are all there are up to the feed's head. */
interface Batch {
  events: StoredEvent[];
  complete: boolean;
}

/** How soon a feed reads again when committed events were held back behind an older transaction still running. */
const HELD_BACK_MS = 25;

/** The subscribers of one account in this process, and the account's recent events, read once for all of them. */
class AccountFeed {
  /** Every event up to this id has been read from the store. */
  head: number;
  /** The events in (bufferFrom, head], in order. */
  private buffer: StoredEvent[] = [];
  private bufferFrom: number;
  readonly subscribers = new Set<Subscriber>();
  private reading: Promise<void> | undefined;
  private readAgain = false;
  private retry: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Db,
    readonly accountId: string,
    readonly log: Pick<FastifyBaseLogger, 'warn'>,
    head: number,
    readonly stillValid: (clientId: string, expiresAt: number) => boolean,
  ) {
    this.head = head;
    this.bufferFrom = head;
  }

  /** The buffered events after `cursor`, or undefined when the buffer does not reach back that far. */
  buffered(cursor: number): Batch | undefined {
    if (cursor < this.bufferFrom) return undefined;
    // Ids grow but are not contiguous: the first one past the cursor, by bisection.
    let low = 0;
    let high = this.buffer.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.buffer[middle].id <= cursor) low = middle + 1;
      else high = middle;
    }
    return { events: this.buffer.slice(low, low + BATCH), complete: low + BATCH >= this.buffer.length };
  }

  async read(cursor: number): Promise<Batch> {
    const { events } = await readEvents(this.db, this.accountId, cursor, BATCH);
    return { events, complete: events.length < BATCH };
  }

  /** Reads what is new, then lets every subscriber catch up. */
  refresh(): Promise<void> {
    if (this.reading) {
      this.readAgain = true;
      return this.reading;
    }
    this.reading = (async () => {
      let heldBack = false;
      try {
        do {
          this.readAgain = false;
          for (;;) {
            const read = await readEvents(this.db, this.accountId, this.head, BATCH);
            this.buffer.push(...read.events);
            if (this.buffer.length > BUFFERED) {
              const dropped = this.buffer.length - BUFFERED;
              this.bufferFrom = this.buffer[dropped - 1].id;
              this.buffer = this.buffer.slice(dropped);
            }
            this.head = Math.max(this.head, read.through);
            heldBack = read.heldBack;
            if (read.events.length < BATCH) break;
          }
        } while (this.readAgain);
      } catch (error) {
        this.log.warn({ err: error, accountId: this.accountId }, 'could not read new events');
      } finally {
        this.reading = undefined;
      }
      // Committed but behind an older transaction still running (PostgreSQL): soon readable, without a new wake-up.
      if (heldBack && !this.retry && this.subscribers.size > 0) {
        this.retry = setTimeout(() => {
          this.retry = undefined;
          void this.refresh();
        }, HELD_BACK_MS);
      }
      for (const subscriber of this.subscribers) void subscriber.pump();
    })();
    return this.reading;
  }

  close(): void {
    if (this.retry) clearTimeout(this.retry);
    this.retry = undefined;
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
  /** Streams open on this process per API client (DPC_EVENTS_STREAMS_PER_CLIENT at most). */
  private readonly openPerClient = new Map<string, number>();

  constructor(
    private readonly db: Db,
    private readonly wakeups: OutboxWakeups,
    private readonly settings: {
      pollMs: number;
      heartbeatMs: number;
      log: Pick<FastifyBaseLogger, 'warn'>;
      /** Whether a stream's access still stands (TokenService.stillValid): checked before each write and heartbeat. */
      stillValid: (clientId: string, expiresAt: number) => boolean;
      /** Streams one API client may hold open on this process at once; more are 429. */
      streamsPerClient: number;
    },
  ) {}

  /**
   * Counts a stream of `clientId` about to open (until subscribe()'s socket closes: no listener of its own, since
   * every byte of an idle stream counts at 10,000 of them); 429 when the client already holds streamsPerClient
   * of them on this process (each holds a connection for hours).
   */
  admit(clientId: string): void {
    const open = this.openPerClient.get(clientId) ?? 0;
    const limit = this.settings.streamsPerClient;
    if (open >= limit) {
      throw new ProblemError(
        429,
        `This API client already has ${limit} event streams open on this server; close one (or resume one with Last-Event-ID) first.`,
        { name: 'too-many-streams', headers: { 'retry-after': '5' } },
      );
    }
    this.openPerClient.set(clientId, open + 1);
  }

  /** A stream admit() counted has ended. */
  private release(clientId: string): void {
    const left = (this.openPerClient.get(clientId) ?? 1) - 1;
    if (left > 0) this.openPerClient.set(clientId, left);
    else this.openPerClient.delete(clientId);
  }

  get subscriberCount(): number {
    let count = 0;
    for (const feed of this.feeds.values()) count += feed.subscribers.size;
    return count;
  }

  /**
   * Follows the account's events after `cursor` onto `socket` (an answer begun, written straight to its connection) until it closes. `head` is the account's last
   * id now; `before`, ids past the cursor already committed when the client subscribed, are not sent.
   */
  subscribe(
    accountId: string,
    socket: Socket,
    access: StreamAccess,
    filter: EventFilter,
    cursor: number,
    head: number,
    before?: Set<number>,
  ): void {
    // Gone already (its 'close' came and went): nothing to follow.
    if (socket.destroyed) {
      this.release(access.clientId);
      return;
    }
    this.start();
    let feed = this.feeds.get(accountId);
    if (!feed) {
      feed = new AccountFeed(this.db, accountId, this.settings.log, head, this.settings.stillValid);
      this.feeds.set(accountId, feed);
    }
    const subscriber = new Subscriber(feed, socket, filter, cursor, access, before?.size ? before : undefined);
    feed.subscribers.add(subscriber);
    socket.on('close', () => {
      this.release(access.clientId);
      subscriber.closed = true;
      feed.subscribers.delete(subscriber);
      if (feed.subscribers.size === 0 && this.feeds.get(accountId) === feed) {
        feed.close();
        this.feeds.delete(accountId);
      }
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
        for (const subscriber of feed.subscribers) if (subscriber.mayGoOn()) subscriber.socket.write(': keep-alive\n\n');
    }, this.settings.heartbeatMs).unref();
  }

  /** Ends every stream (the server is closing); clients resume elsewhere with Last-Event-ID. */
  close(): void {
    if (this.poll) clearInterval(this.poll);
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.poll = undefined;
    this.unsubscribe?.();
    for (const feed of this.feeds.values()) {
      feed.close();
      for (const subscriber of feed.subscribers) subscriber.socket.end();
    }
    this.feeds.clear();
  }
}
