import { AsyncLocalStorage } from 'node:async_hooks';
import { EventEmitter } from 'node:events';

/**
 * Outbox events are written by the transaction of their change, at its commit: emit() (core/outbox.ts)
 * hands the event to the transaction's connection with this marker statement, which never reaches the
 * database. The connection keeps the events of its open transaction and writes them all with the commit:
 * on PostgreSQL in the commit's own round trip (`insert …; commit`), on SQLite in one statement before the
 * group's commit (group-commit.ts). A transaction that rolls back (or a savepoint rolled back to) drops
 * its events with its changes: an event exists if and only if its change committed.
 */
export const DEFERRED_EVENT = '/* dpc: outbox event, written at commit */';

/** The PostgreSQL channel the committing process notifies (its payload: account ids, comma-separated). */
export const EVENTS_CHANNEL = 'dpc_events';

/** Events per transaction at most on PostgreSQL: an id is the transaction's id × this + the event's place. */
export const EVENTS_PER_TRANSACTION = 4096;

/** An event as a transaction writes it. */
export interface DeferredEvent {
  accountId: string;
  type: string;
  projectId: string | null;
  subject: string;
  /** JSON. */
  data: string;
  occurredAt: string;
}

/** The marker statement's parameters for `event`, and back. */
export function deferredParameters(event: DeferredEvent): unknown[] {
  return [event.accountId, event.type, event.projectId, event.subject, event.data, event.occurredAt];
}

export function deferredEvent(parameters: readonly unknown[]): DeferredEvent {
  const [accountId, type, projectId, subject, data, occurredAt] = parameters as (string | null)[];
  return { accountId: accountId!, type: type!, projectId, subject: subject!, data: data!, occurredAt: occurredAt! };
}

/**
 * The event of an audited API write (projects.created, …), waiting for the request's transaction. The
 * first transaction of the request that changed something and commits writes it (see writeContext); when
 * none does, the audit plugin writes it after the request in one of its own (a write of one statement).
 */
export interface PendingWriteEvent {
  /** The event as it is now (the handler may have named more ids meanwhile). */
  event(): DeferredEvent;
  /** Written by a committed transaction. */
  written: boolean;
  /** A transaction is committing it now: no other may take it meanwhile. */
  committing: boolean;
  /** The request answered: no transaction takes it any more. */
  closed: boolean;
}

/** The audited write the code running now belongs to (entered by the audit plugin around a write's handler). */
export const writeContext = new AsyncLocalStorage<PendingWriteEvent>();

/** The pending write event a committing transaction should take, if any. */
export function claimableWriteEvent(): PendingWriteEvent | undefined {
  const pending = writeContext.getStore();
  return pending && !pending.written && !pending.committing && !pending.closed ? pending : undefined;
}

/**
 * Told (in this process) the accounts of events a transaction of this process just committed: the
 * wake-up for readers on SQLite, which has no NOTIFY (and what the PostgreSQL store notifies).
 */
export const committedEvents = new EventEmitter().setMaxListeners(0);

export function announceCommitted(events: readonly DeferredEvent[]): void {
  if (events.length === 0) return;
  const accounts = [...new Set(events.map((event) => event.accountId))];
  committedEvents.emit('committed', accounts);
}
