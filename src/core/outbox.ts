import { EventEmitter } from 'node:events';
import { sql } from 'kysely';
import { statementsAreRoundTrips, type Executor } from './db/database.ts';
import type { OutboxEventTable } from './db/schema.ts';

/** The PostgreSQL channel an event's transaction notifies (its payload: the account id) when it commits. */
export const EVENTS_CHANNEL = 'dpc_events';

/** A change worth announcing, as an area hands it to emit(). */
export interface NewEvent {
  accountId: string;
  /** `<thing>.<what happened>`: `pipeline-execution.finished`, `environments.created`, ... */
  type: string;
  projectId?: string | null;
  /** What the event is about, path-like: `pipeline-executions/<id>`. */
  subject: string;
  /** What a subscriber needs to know without asking; never a secret. */
  data?: Record<string, unknown>;
}

/** An event as stored and as announced. */
export interface StoredEvent {
  id: number;
  accountId: string;
  type: string;
  projectId: string | null;
  subject: string;
  data: Record<string, unknown>;
  occurredAt: string;
}

/**
 * Told (in this process) the accounts of events just emitted: a wake-up for readers on SQLite, which has no
 * NOTIFY. The events may not be committed yet when it fires (or ever: the transaction may roll back), so a
 * reader that finds nothing simply finds it at its next look.
 */
export const localEmits = new EventEmitter().setMaxListeners(0);

/**
 * Writes `event` into the outbox in `trx`, the transaction of the change it announces: it is announced if
 * and only if the change commits. Answers its id.
 *
 * The id is the account's next one, taken by updating the account's row of `event_sequences`: the row
 * stays locked until `trx` ends, so another transaction emitting for the same account waits, and the
 * account's events commit in the order of their ids. A reader that has seen id n therefore never finds a
 * smaller id later (no event is skipped), whichever server process wrote it. The price is that the
 * transactions emitting for one account queue behind each other from their emit to their commit: emit
 * as the last statement of a transaction (a transaction that emitted and then waited for another row
 * lock could deadlock with one holding that row and waiting to emit).
 */
export async function emit(trx: Executor, event: NewEvent): Promise<number> {
  // One event (every state change): plain SQL, no query building; on PostgreSQL one round trip for the id,
  // the row and the notification together.
  const { accountId } = event;
  const values = [event.type, event.projectId ?? null, event.subject, JSON.stringify(event.data ?? {}), new Date().toISOString()];
  let id: number;
  if (statementsAreRoundTrips(trx)) {
    const { rows } = await sql<{ id: number }>`
      with next as (
        insert into event_sequences (account_id, last_id) values (${accountId}, 1)
        on conflict (account_id) do update set last_id = event_sequences.last_id + 1
        returning last_id
      ), stored as (
        insert into outbox_events (account_id, id, type, project_id, subject, data, occurred_at)
        select ${accountId}, last_id, ${values[0]}, ${values[1]}, ${values[2]}, ${values[3]}, ${values[4]} from next
        returning id
      )
      select id, pg_notify(${EVENTS_CHANNEL}, ${accountId}) as notified from stored`.execute(trx);
    id = Number(rows[0].id);
  } else {
    const { rows } = await sql<{ lastId: number }>`
      insert into event_sequences (account_id, last_id) values (${accountId}, 1)
      on conflict (account_id) do update set last_id = last_id + 1
      returning last_id`.execute(trx);
    id = Number(rows[0].lastId);
    await sql`insert into outbox_events (account_id, id, type, project_id, subject, data, occurred_at)
      values (${accountId}, ${id}, ${values[0]}, ${values[1]}, ${values[2]}, ${values[3]}, ${values[4]})`.execute(trx);
  }
  setImmediate(() => localEmits.emit('emitted', [accountId]));
  return id;
}

/** emit() for several events (of one or more accounts), ids taken per account in one statement. */
export async function emitMany(trx: Executor, events: NewEvent[]): Promise<number[]> {
  if (events.length === 0) return [];
  const ids = new Array<number>(events.length);
  const byAccount = new Map<string, number[]>();
  events.forEach((event, index) => {
    const indexes = byAccount.get(event.accountId) ?? [];
    indexes.push(index);
    byAccount.set(event.accountId, indexes);
  });
  const occurredAt = new Date().toISOString();
  // Accounts locked in one order everywhere, so two transactions emitting for several cannot deadlock.
  for (const accountId of [...byAccount.keys()].sort()) {
    const indexes = byAccount.get(accountId)!;
    const count = indexes.length;
    const { lastId } = await trx
      .insertInto('eventSequences')
      .values({ accountId, lastId: count })
      .onConflict((oc) => oc.column('accountId').doUpdateSet((eb) => ({ lastId: eb('eventSequences.lastId', '+', count) })))
      .returning('lastId')
      .executeTakeFirstOrThrow();
    const first = Number(lastId) - count + 1;
    const rows: OutboxEventTable[] = indexes.map((index, offset) => {
      const event = events[index];
      ids[index] = first + offset;
      return {
        accountId,
        id: first + offset,
        type: event.type,
        projectId: event.projectId ?? null,
        subject: event.subject,
        data: JSON.stringify(event.data ?? {}),
        occurredAt,
      };
    });
    await trx.insertInto('outboxEvents').values(rows).execute();
    // Delivered to listeners when (and only if) the transaction commits.
    if (statementsAreRoundTrips(trx)) await sql`select pg_notify(${EVENTS_CHANNEL}, ${accountId})`.execute(trx);
  }
  const accounts = [...byAccount.keys()];
  setImmediate(() => localEmits.emit('emitted', accounts));
  return ids;
}

/** The account's last event id (0 before its first); every event up to it is committed. */
export async function lastEventId(db: Executor, accountId: string): Promise<number> {
  const row = await db.selectFrom('eventSequences').select('lastId').where('accountId', '=', accountId).executeTakeFirst();
  return row ? Number(row.lastId) : 0;
}

/** The account's oldest retained event id, or undefined when it has none. */
export async function firstRetainedEventId(db: Executor, accountId: string): Promise<number | undefined> {
  const row = await db
    .selectFrom('outboxEvents')
    .select((eb) => eb.fn.min('id').as('id'))
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  return row?.id === null || row?.id === undefined ? undefined : Number(row.id);
}

export interface EventFilter {
  /** Exact types, or prefixes ending in `*` (`pipeline-execution.*`). */
  types?: string[];
  projectId?: string;
}

/** Whether `event` passes `filter`. */
export function matches(filter: EventFilter, event: Pick<StoredEvent, 'type' | 'projectId'>): boolean {
  if (filter.projectId !== undefined && event.projectId !== filter.projectId) return false;
  if (!filter.types || filter.types.length === 0) return true;
  return filter.types.some((type) => (type.endsWith('*') ? event.type.startsWith(type.slice(0, -1)) : event.type === type));
}

/** The account's events after `afterId`, oldest first, at most `limit`. */
export async function eventsAfter(db: Executor, accountId: string, afterId: number, limit: number): Promise<StoredEvent[]> {
  const rows = await db
    .selectFrom('outboxEvents')
    .selectAll()
    .where('accountId', '=', accountId)
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute();
  return rows.map(storedEvent);
}

/** One event of the account, or undefined (never written, or no longer retained). */
export async function eventById(db: Executor, accountId: string, id: number): Promise<StoredEvent | undefined> {
  const row = await db
    .selectFrom('outboxEvents')
    .selectAll()
    .where('accountId', '=', accountId)
    .where('id', '=', id)
    .executeTakeFirst();
  return row && storedEvent(row);
}

function storedEvent(row: OutboxEventTable): StoredEvent {
  return {
    id: Number(row.id),
    accountId: row.accountId,
    type: row.type,
    projectId: row.projectId,
    subject: row.subject,
    data: JSON.parse(row.data) as Record<string, unknown>,
    occurredAt: row.occurredAt,
  };
}

/** Deletes events that occurred before `before` (ISO time); answers how many. Ids are never handed out again. */
export async function pruneEvents(db: Executor, before: string): Promise<number> {
  const result = await db.deleteFrom('outboxEvents').where('occurredAt', '<', before).executeTakeFirst();
  return Number(result.numDeletedRows);
}

const VERBS: Record<string, string> = { POST: 'created', PUT: 'changed', PATCH: 'changed', DELETE: 'deleted' };

/**
 * The event of a write the audit trail records: `<collection>.<created|changed|deleted>`, the collection
 * being the last fixed segment of the operation's path (`POST /dpc/v1/projects/:projectId/environments` is
 * `environments.created`, `PATCH .../variables/:variableName` is `variables.changed`). Undefined for reads.
 */
export function writeEventType(method: string, route: string): string | undefined {
  const verb = VERBS[method];
  if (!verb) return undefined;
  const segments = route
    .replace(/^\/dpc\/v1\//, '')
    .split('/')
    .filter((segment) => segment && !segment.startsWith(':'));
  return `${segments.at(-1) ?? 'resource'}.${verb}`;
}
