import { CompiledQuery, sql } from 'kysely';
import { statementsAreRoundTrips, type Executor } from './db/database.ts';
import {
  committedEvents,
  DEFERRED_EVENT,
  deferredParameters,
  EVENTS_CHANNEL,
  EVENTS_PER_TRANSACTION,
} from './db/deferred-events.ts';
import { deferOnSqlite, LAST_EVENT_ID_SQL } from './db/group-commit.ts';
import type { OutboxEventTable } from './db/schema.ts';

export { EVENTS_CHANNEL };

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
 * Told (in this process) the accounts of events a transaction of this process committed: the wake-up
 * for readers on SQLite, which has no NOTIFY (on PostgreSQL the process notifies too).
 */
export const localEmits = committedEvents;

/**
 * Writes `event` into the outbox in `trx`, the transaction of the change it announces: it is written with
 * that transaction's commit, and only if the transaction commits (db/deferred-events.ts). Nothing is sent
 * to the store here: the connection keeps the event and writes the transaction's events with its commit,
 * on PostgreSQL in the commit's round trip, on SQLite with the other transactions of its group commit.
 *
 * Ids are global and only grow, but are not contiguous. No lock is taken: on SQLite, writes (and the ids
 * handed out with them) are serialised by the write lock, so ids commit in order; on PostgreSQL, an id is
 * a transaction's id × 4096 + its place (a subtransaction's id past the first 4,095 events,
 * db/database.ts), and readers read only ids below the oldest transaction still running (readEvents), so
 * a reader that has passed id n never finds a smaller one later.
 *
 * Called with the database rather than a transaction, it writes the event in a transaction of its own.
 */
export async function emit(trx: Executor, event: NewEvent): Promise<void> {
  if (!trx.isTransaction) {
    await trx.transaction().execute((inner) => emit(inner, event));
    return;
  }
  const deferred = {
    accountId: event.accountId,
    type: event.type,
    projectId: event.projectId ?? null,
    subject: event.subject,
    data: JSON.stringify(event.data ?? {}),
    occurredAt: new Date().toISOString(),
  };
  const executor = trx.getExecutor();
  // SQLite: kept by the driver at once (its one connection is held by this transaction).
  if (deferOnSqlite(executor.adapter, deferred)) return;
  // Straight to the connection: no plugin, log or result handling for a statement that is never sent.
  const marker: CompiledQuery = { ...MARKER, parameters: deferredParameters(deferred) };
  await executor.provideConnection((connection) => connection.executeQuery(marker));
}

/** The marker statement (its parameters are each event's). */
const MARKER = CompiledQuery.raw(DEFERRED_EVENT);

/** emit() for several events. */
export async function emitMany(trx: Executor, events: NewEvent[]): Promise<void> {
  if (!trx.isTransaction) {
    if (events.length > 0) await trx.transaction().execute((inner) => emitMany(inner, events));
    return;
  }
  for (const event of events) await emit(trx, event);
}

/** The lowest id a PostgreSQL transaction still running (or one not begun) may write: every id below it is final. */
const SAFE_POINT = sql<number>`pg_snapshot_xmin(pg_current_snapshot())::text::bigint * ${sql.lit(EVENTS_PER_TRANSACTION)}`;

/**
 * An id up to which every event of the account is committed and visible to any later read (0 before the
 * first): a stream that starts "now" starts after it. PostgreSQL: the safe point, of every account; SQLite,
 * which commits ids in order: the account's last event, or retention's floor if that is higher.
 */
export async function lastEventId(db: Executor, accountId: string): Promise<number> {
  if (statementsAreRoundTrips(db)) {
    const { rows } = await sql<{ head: number }>`select ${SAFE_POINT} - 1 as head`.execute(db);
    return Number(rows[0].head);
  }
  // SQLite commits ids in order: every later event of the account gets an id past its last one, and past the
  // floor retention raised before it deleted (an account whose events all went keeps the ids it was sent).
  const { rows } = await sql<{ head: number | null }>`
    select max(coalesce((select max(id) from outbox_events where account_id = ${accountId}), 0),
      coalesce((select last_id from outbox_counter), 0)) as head`.execute(db);
  return Number(rows[0]?.head ?? 0);
}

/**
 * Ids of the account's events past `afterId` that have committed (at most `limit`). On PostgreSQL events commit
 * out of id order, so a stream that starts "now" at the safe point leaves out these: they happened before it.
 */
export async function committedAfter(db: Executor, accountId: string, afterId: number, limit = 10_000): Promise<Set<number>> {
  const rows = await db
    .selectFrom('outboxEvents')
    .select('id')
    .where('accountId', '=', accountId)
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute();
  return new Set(rows.map((row) => Number(row.id)));
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

export interface EventsRead {
  events: StoredEvent[];
  /**
   * Every event of the account up to this id was read (or is before `afterId`): where the reader may move
   * its cursor to when it finds fewer than it asked for.
   */
  through: number;
  /** Later events are committed but not readable yet (PostgreSQL: an older transaction is still running). */
  heldBack: boolean;
}

/**
 * The account's events after `afterId`, oldest first, at most `limit`, and how far the answer reaches. On
 * PostgreSQL only ids below the safe point (SAFE_POINT) are read: ids are taken in the order of the
 * transactions' ids, not of their commits, and any transaction that may still commit has an id at or past it.
 */
export async function readEvents(db: Executor, accountId: string, afterId: number, limit: number): Promise<EventsRead> {
  const postgres = statementsAreRoundTrips(db);
  // One statement: how far ids are final (PostgreSQL: the safe point; SQLite, which commits ids in order:
  // the last handed out), and the events after the cursor (none: one row of nulls).
  const { rows: found } = await (
    postgres
      ? sql<OutboxEventTable & { final: number }>`
        select s.final, e.* from (select ${SAFE_POINT} - 1 as final) s
        left join lateral (
          select * from outbox_events where account_id = ${accountId} and id > ${afterId} order by id limit ${limit}
        ) e on true`
      : // SQLite: ids are handed out and committed in order, so every event visible is final.
        sql<OutboxEventTable & { final: number }>`
        select null as final, e.* from outbox_events e where account_id = ${accountId} and id > ${afterId} order by id limit ${limit}`
  ).execute(db);
  const final = postgres ? Number(found[0]?.final ?? 0) : Number(found.at(-1)?.id ?? afterId);
  const rows = found.filter((row) => row.id !== null);
  const events = rows.filter((row) => Number(row.id) <= final).map(storedEvent);
  const heldBack = events.length < rows.length;
  const through = events.length === limit ? events.at(-1)!.id : Math.max(afterId, final);
  return { events, through, heldBack };
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

/**
 * Deletes events that occurred before `before` (ISO time); answers how many. Ids are never handed out again.
 * Within an account ids grow with time, so its old events are those below its first event at or after
 * `before`, found through the primary key by reading only the events deleted (there is no index on the time:
 * one b-tree fewer to write with each event). On PostgreSQL ids follow the transactions' start, so an event
 * of a transaction that began before an older one's event may go with it, younger by that transaction's length.
 */
export async function pruneEvents(db: Executor, before: string): Promise<number> {
  let deleted = 0;
  if (!statementsAreRoundTrips(db)) {
    // SQLite hands the next id out past the last event kept (db/group-commit.ts): first the counter's floor
    // is raised past every id handed out, so that one whose event goes is not handed out again.
    await sql`update outbox_counter set last_id = (${sql.raw(LAST_EVENT_ID_SQL)})`.execute(db);
  }
  for (const { id: accountId } of await db.selectFrom('accounts').select('id').execute()) {
    const kept = await db
      .selectFrom('outboxEvents')
      .select('id')
      .where('accountId', '=', accountId)
      .where('occurredAt', '>=', before)
      .orderBy('id')
      .limit(1)
      .executeTakeFirst();
    let deletion = db.deleteFrom('outboxEvents').where('accountId', '=', accountId);
    if (kept) deletion = deletion.where('id', '<', kept.id);
    deleted += Number((await deletion.executeTakeFirst()).numDeletedRows);
  }
  return deleted;
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
