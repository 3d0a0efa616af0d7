import { setTimeout as sleep } from 'node:timers/promises';
import {
  CompiledQuery,
  SqliteDialect,
  type DatabaseConnection,
  type DialectAdapter,
  type Driver,
  type QueryCompiler,
  type QueryResult,
} from 'kysely';
import {
  announceCommitted,
  claimableWriteEvent,
  DEFERRED_EVENT,
  deferredEvent,
  type DeferredEvent,
  type PendingWriteEvent,
} from './deferred-events.ts';

/** How many transactions a group takes at most: bounds how long its first one waits for the commit. */
const GROUP_SIZE = 64;

/** Values bound by one statement at most (SQLite's limit is 32,766). */
const VALUES_PER_STATEMENT = 32_000;

/**
 * Rows of one table that transactions hand to their group's commit instead of inserting them one statement
 * each (deferInsertOnSqlite): the group writes each kind's rows in one statement, before its commit. For
 * rows nothing reads back in the transaction that writes them (it cannot see them) and whose ids it does not need.
 */
export interface DeferredInsert {
  /** `insert into <table> (<columns>)`, without `values`. */
  readonly into: string;
  /** How many values a row has. */
  readonly columns: number;
  /**
   * Which rows are written: a condition on the row's values as SQLite names those of a VALUES list (`column1`,
   * `column2`, …), read when the group commits (`exists (select 1 from projects where id = column2)`: the
   * project was not deleted meanwhile by a later transaction of the group).
   */
  readonly where?: string;
  /** After the values: `on conflict … do nothing`, or nothing. */
  readonly then?: string;
  /** With `then` doing nothing on a conflict: rows whose first `key` values are an earlier row's of the group are not sent again. */
  readonly key?: number;
  /** Told the rows of this kind that the group sent (those `where` kept are in the store) once its commit succeeded; must not throw. */
  readonly committed?: (rows: readonly unknown[][]) => void;
}

const DATA_VERSION = CompiledQuery.raw('pragma data_version');

/**
 * SQLite: the last outbox id handed out on the file: past every event kept (one seek per account), and past the
 * floor in outbox_counter (which retention raises to this before it deletes: core/outbox.ts, pruneEvents).
 */
export const LAST_EVENT_ID_SQL =
  'select max((select last_id from outbox_counter), ' +
  'coalesce((select max((select max(e.id) from outbox_events e where e.account_id = a.id)) from accounts a), 0))';
const LAST_EVENT_ID = CompiledQuery.raw(`${LAST_EVENT_ID_SQL} as lastId`);
/** The counter as every writer keeps it once the file is shared (migration 0045_outbox_shared_counter). */
const SHARED_COUNTER = CompiledQuery.raw('select last_id as lastId, shared from outbox_counter');
const KEEP_COUNTER = 'update outbox_counter set last_id = ?, shared = 1';

/** The outbox's rows as #writeEvents writes them, ids handed out by the group. */
const OUTBOX_INSERT: DeferredInsert = {
  into: 'insert into outbox_events (account_id, id, type, project_id, subject, data, occurred_at)',
  columns: 7,
};

/** How long a statement waits for another connection's write lock before it fails as busy. */
const LOCK_PATIENCE_MS = 5000;

const closedBeforeCommit = () => new Error('The store was closed before these writes were committed.');

const isBusy = (error: unknown) => /^SQLITE_BUSY/.test((error as { code?: string } | undefined)?.code ?? '');

/** Turns for SQLite's one connection, in the order asked; `first` goes ahead of those waiting. */
class Turns {
  #taken = false;
  readonly #waiting: (() => void)[] = [];

  take(options: { first?: boolean } = {}): Promise<void> {
    if (!this.#taken) {
      this.#taken = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => (options.first ? this.#waiting.unshift(resolve) : this.#waiting.push(resolve)));
  }

  give(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#taken = false;
  }
}

/** The transactions of one outer SQLite transaction, each answered once it commits. */
class Group {
  members = 0;
  /** The outbox events of its members that committed into it, written just before its commit. */
  readonly events: DeferredEvent[] = [];
  /** The deferred rows of its members that committed into it, by kind, written just before its commit. */
  readonly rows = new Map<DeferredInsert, unknown[][]>();
  readonly committed: Promise<void>;
  settle!: (failure?: unknown) => void;
  constructor() {
    this.committed = new Promise((resolve, reject) => {
      this.settle = (failure) => (failure === undefined ? resolve() : reject(failure));
    });
    this.committed.catch(() => undefined); // a group whose every member rolled back has no one waiting
  }
}

/**
 * Group commit on SQLite's single connection. A commit in WAL mode writes every page the transaction
 * changed to the log (and now and then folds the log into the database): about 90 µs here, most of a
 * small write's store time. Transactions of the same turn of the event loop therefore join one outer
 * transaction, each in a savepoint of its own: a transaction that fails rolls back to its savepoint and
 * leaves the others' writes alone. The outer transaction commits after the turn, or at GROUP_SIZE; a
 * transaction's commit answers only once that commit succeeded (or with its failure), and so does its
 * rollback (see rollbackTransaction), each waiting without the connection so that others can join. A
 * statement outside a transaction (a read) first commits the open group, so it never sees writes that
 * are not committed.
 *
 * A transaction must not wait for another one's answer: the group's commit waits for every transaction
 * in it to end. (It never could wait for a later one: that one waited for the connection.)
 *
 * The outer transaction takes the write lock at BEGIN (IMMEDIATE): a deferred one that reads and then
 * writes fails at once with "database is locked" when another process wrote in between, however long
 * it waited; an immediate one waits its turn. Waiting for the lock happens here, between tries, with
 * the connection free for others (busy_timeout is 0): SQLite's own wait would hold the thread, and
 * another connection in the same thread could not commit what holds the lock.
 */
class GroupCommitDriver implements Driver {
  readonly #turns = new Turns();
  /** SQLite's one connection, taken from the inner driver for good. */
  #connection!: DatabaseConnection;
  /** The same as lent out: a statement outside a transaction first commits the open group. */
  #lent!: DatabaseConnection;
  #group: Group | undefined;
  /** Whether the connection's holder is inside a transaction (its savepoint open). */
  #inTransaction = false;
  /** The outbox events of the transaction holding the connection (deferred-events.ts). */
  #events: DeferredEvent[] = [];
  /** The deferred rows of the transaction holding the connection (deferInsert). */
  #rows: [DeferredInsert, unknown[]][] = [];
  /**
   * The last outbox id this connection handed out, SQLite's data_version when it did (another connection's
   * commit changes it), and whether the file is shared (every writer keeps the counter): see #writeEvents.
   */
  #lastEventId: { id: number; dataVersion: number; shared: boolean } | undefined;
  /** The pending event of the audited write the transaction belongs to, and SQLite's change count at its start. */
  #pending: { write: PendingWriteEvent; changesBefore: number } | undefined;

  constructor(
    private readonly inner: Driver,
    /** Whether SQLite has a transaction open (it rolls one back by itself on some failures, e.g. a full disk). */
    private readonly sqliteInTransaction: () => boolean,
  ) {}

  async init(): Promise<void> {
    await this.inner.init();
    this.#connection = await this.inner.acquireConnection();
    this.#lent = {
      executeQuery: async (query) => {
        if (query.sql === DEFERRED_EVENT) {
          if (!this.#inTransaction) throw new Error('An outbox event is written in a transaction.');
          this.#events.push(deferredEvent(query.parameters));
          return { rows: [] };
        }
        return this.#inTransaction
          ? this.#connection.executeQuery(query)
          : this.#outsideTransaction(() => this.#connection.executeQuery(query));
      },
      streamQuery: (query, chunkSize) => this.#streamCommitted(query, chunkSize),
    };
  }

  /**
   * Keeps `event` for the transaction holding the connection (the only one whose code can run: Kysely runs a
   * transaction's callback only once it began, and it holds the connection until it ends); no statement.
   */
  defer(event: DeferredEvent): void {
    if (!this.#inTransaction) throw new Error('An outbox event is written in a transaction.');
    this.#events.push(event);
  }

  /** Keeps `row` for the transaction holding the connection, for its group's commit (see defer). */
  deferInsert(insert: DeferredInsert, row: unknown[]): void {
    if (!this.#inTransaction) throw new Error('A deferred row is written in a transaction.');
    if (row.length !== insert.columns) throw new Error(`A deferred row has ${insert.columns} values, not ${row.length}.`);
    this.#rows.push([insert, row]);
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    await this.#turns.take();
    return this.#lent;
  }

  async releaseConnection(): Promise<void> {
    this.#turns.give();
  }

  async beginTransaction(): Promise<void> {
    const group = this.#group ?? (await this.#whenUnlocked(async () => this.#group ?? this.#open()));
    await this.#run('savepoint member');
    group.members += 1;
    this.#inTransaction = true;
    this.#events = [];
    this.#rows = [];
    const write = claimableWriteEvent();
    this.#pending = write && { write, changesBefore: await this.#totalChanges() };
  }

  async commitTransaction(): Promise<void> {
    const group = this.#member();
    const events = this.#events;
    this.#events = [];
    const rows = this.#rows;
    this.#rows = [];
    // The audited write's event goes with the first of its transactions that changed something.
    const pending = this.#pending;
    this.#pending = undefined;
    const write =
      pending && !pending.write.written && !pending.write.committing && (await this.#totalChanges()) > pending.changesBefore
        ? pending.write
        : undefined;
    if (write) events.unshift(write.event());
    await this.#run('release member');
    this.#inTransaction = false;
    group.events.push(...events);
    for (const [insert, row] of rows) {
      const kept = group.rows.get(insert);
      if (kept) kept.push(row);
      else group.rows.set(insert, [row]);
    }
    if (write) write.committing = true;
    try {
      if (group.members >= GROUP_SIZE) await this.#commit();
      await this.#awayFromConnection(group.committed);
      if (write) write.written = true;
    } finally {
      if (write) write.committing = false;
    }
  }

  async #totalChanges(): Promise<number> {
    const { rows } = await this.#connection.executeQuery<{ n: number }>(CompiledQuery.raw('select total_changes() as n'));
    return Number(rows[0].n);
  }

  /**
   * A transaction that fails waits for its group too: what failed it may have been another member's
   * write, not committed yet (a name already taken). If the group's commit fails, that write never
   * was, and the group's failure is the answer instead.
   */
  async rollbackTransaction(): Promise<void> {
    if (!this.#inTransaction) return; // released into its group already, whose failure is the answer
    const group = this.#member();
    this.#inTransaction = false;
    this.#events = [];
    this.#rows = [];
    this.#pending = undefined;
    if (this.sqliteInTransaction()) {
      await this.#run('rollback to member');
      await this.#run('release member');
      await this.#awayFromConnection(group.committed);
      return;
    }
    // SQLite rolled the outer transaction back itself: the writes of the group's earlier members are gone.
    group.settle(new Error('The store rolled back the transaction these writes were grouped in.'));
    if (this.#group === group) this.#group = undefined;
  }

  /** The group of the transaction holding the connection (gone only if the store was closed meanwhile). */
  #member(): Group {
    if (!this.#group) throw closedBeforeCommit();
    return this.#group;
  }

  /**
   * Waits for `wait` with the connection given to the next in line (so that others can join the group
   * or read meanwhile), then takes it back ahead of those waiting.
   */
  async #awayFromConnection(wait: Promise<unknown>): Promise<void> {
    this.#turns.give();
    try {
      await wait;
    } finally {
      await this.#turns.take({ first: true });
    }
  }

  savepoint(_: DatabaseConnection, name: string, compile: QueryCompiler['compileQuery']): Promise<void> {
    return this.inner.savepoint!(this.#connection, name, compile);
  }

  rollbackToSavepoint(_: DatabaseConnection, name: string, compile: QueryCompiler['compileQuery']): Promise<void> {
    return this.inner.rollbackToSavepoint!(this.#connection, name, compile);
  }

  releaseSavepoint(_: DatabaseConnection, name: string, compile: QueryCompiler['compileQuery']): Promise<void> {
    return this.inner.releaseSavepoint!(this.#connection, name, compile);
  }

  async destroy(): Promise<void> {
    if (this.#group && this.#inTransaction) {
      // A transaction is half done: closing rolls the whole group back.
      this.#group.settle(closedBeforeCommit());
      this.#group = undefined;
    } else if (this.#group) {
      await this.#commit();
    }
    await this.inner.destroy();
  }

  /** Begins a group and has it committed after this turn (unless a read or GROUP_SIZE commits it first). */
  async #open(): Promise<Group> {
    await this.#run('begin immediate');
    const group = (this.#group = new Group());
    setImmediate(() => void this.#commitInTurn(group));
    return group;
  }

  async #commitInTurn(group: Group): Promise<void> {
    await this.#turns.take();
    try {
      if (this.#group === group) await this.#commit();
    } catch {
      // A failed rollback after a failed commit: the group's members have their answer already.
    } finally {
      this.#turns.give();
    }
  }

  async #commit(): Promise<void> {
    const group = this.#group!;
    this.#group = undefined;
    try {
      if (group.events.length > 0) await this.#writeEvents(group.events);
      for (const [insert, rows] of group.rows) await this.#writeRows(insert, rows);
      await this.#run('commit');
      for (const [insert, rows] of group.rows) insert.committed?.(rows);
      group.settle();
      announceCommitted(group.events);
    } catch (error) {
      group.settle(error);
      if (this.sqliteInTransaction()) await this.#run('rollback');
    }
  }

  /** A statement outside a transaction: it sees only committed writes, and may wait for the write lock. */
  #outsideTransaction<R>(statement: () => Promise<R>): Promise<R> {
    return this.#whenUnlocked(async () => {
      if (this.#group) await this.#commit();
      return statement();
    });
  }

  async *#streamCommitted<R>(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    if (this.#group && !this.#inTransaction) await this.#commit();
    yield* this.#connection.streamQuery<R>(query, chunkSize);
  }

  /**
   * Runs `statement` (with the connection held) again while SQLite answers SQLITE_BUSY, another
   * connection holding the write lock, for up to LOCK_PATIENCE_MS; between tries the connection is free
   * for others (reads need no lock in WAL mode).
   */
  async #whenUnlocked<R>(statement: () => Promise<R>): Promise<R> {
    const deadline = performance.now() + LOCK_PATIENCE_MS;
    for (let pause = 1; ; pause = Math.min(2 * pause, 50)) {
      try {
        return await statement();
      } catch (error) {
        if (!isBusy(error) || performance.now() + pause > deadline) throw error;
      }
      await this.#awayFromConnection(sleep(pause));
    }
  }

  /**
   * The group's outbox events, in as few statements as SQLite binds values for. The write lock is held: ids are handed out
   * and committed in order, by every process on the file. The next id follows the last this connection handed
   * out, kept in memory (no counter row to write with each commit) while SQLite's data_version says no other
   * connection has committed since; otherwise it is found again: from the counter once the file is shared
   * (every writer then writes its last id there with each commit), else past every event kept (one seek per
   * account) and past the counter's floor (raised before events are deleted: an id is never handed out twice).
   * A connection that finds another has written marks the file shared with its commit.
   */
  async #writeEvents(events: readonly DeferredEvent[]): Promise<void> {
    const { rows: versions } = await this.#connection.executeQuery<{ data_version: number }>(DATA_VERSION);
    const dataVersion = Number(versions[0].data_version);
    if (this.#lastEventId?.dataVersion !== dataVersion) {
      // Another connection committed since (or this is the first commit of events): where are ids now?
      const { rows: counter } = await this.#connection.executeQuery<{ lastId: number; shared: number }>(SHARED_COUNTER);
      if (Number(counter[0].shared) === 1) {
        // Every writer keeps the counter: one row (not one seek per account).
        this.#lastEventId = { id: Number(counter[0].lastId), dataVersion, shared: true };
      } else {
        const { rows } = await this.#connection.executeQuery<{ lastId: number }>(LAST_EVENT_ID);
        // Another connection wrote since this one's last commit: the file is shared from now on (this commit
        // sets the flag; any other writer reads it under the write lock before it hands out an id).
        const shared = this.#lastEventId !== undefined;
        this.#lastEventId = { id: Number(rows[0].lastId), dataVersion, shared };
      }
    }
    const last = this.#lastEventId.id;
    // Handed out even if the commit then fails: ids may have gaps, never repeats.
    this.#lastEventId.id += events.length;
    if (this.#lastEventId.shared) {
      await this.#connection.executeQuery(CompiledQuery.raw(KEEP_COUNTER, [this.#lastEventId.id]));
    }
    await this.#writeRows(
      OUTBOX_INSERT,
      events.map((event, i) => [
        event.accountId,
        last + i + 1,
        event.type,
        event.projectId,
        event.subject,
        event.data,
        event.occurredAt,
      ]),
    );
  }

  /** The group's deferred rows of one kind, in as few statements as SQLite binds values for. */
  async #writeRows(insert: DeferredInsert, all: readonly unknown[][]): Promise<void> {
    let rows = all;
    if (insert.key) {
      const seen = new Set<string>();
      rows = all.filter((row) => {
        const key = row.slice(0, insert.key).join('\u0000');
        return seen.has(key) ? false : (seen.add(key), true);
      });
    }
    const perStatement = Math.max(1, Math.floor(VALUES_PER_STATEMENT / insert.columns));
    for (let i = 0; i < rows.length; i += perStatement) {
      const chunk = rows.length <= perStatement ? rows : rows.slice(i, i + perStatement);
      await this.#connection.executeQuery(CompiledQuery.raw(insertText(insert, chunk.length), chunk.flat()));
    }
  }

  #run(statement: string): Promise<unknown> {
    return this.#connection.executeQuery(CompiledQuery.raw(statement));
  }
}

/** The statement of `insert` for `count` rows, by kind and count (built once: groups of a few rows are the common case). */
const insertTexts = new WeakMap<DeferredInsert, string[]>();

function insertText(insert: DeferredInsert, count: number): string {
  let texts = insertTexts.get(insert);
  if (!texts) insertTexts.set(insert, (texts = []));
  if (texts[count] !== undefined) return texts[count];
  const row = `(${Array.from({ length: insert.columns }, () => '?').join(', ')})`;
  const values = `values ${Array.from({ length: count }, () => row).join(', ')}`;
  const selected = insert.where ? `select * from (${values}) where ${insert.where}` : values;
  const text = `${insert.into} ${selected}${insert.then ? ` ${insert.then}` : ''}`;
  // Kept for groups of up to GROUP_SIZE rows; a larger one (a transaction of many rows) is built each time.
  if (count <= GROUP_SIZE) texts[count] = text;
  return text;
}

/** The group-commit driver of each SQLite store, by its Kysely adapter (which its transactions share). */
const driversByAdapter = new WeakMap<DialectAdapter, GroupCommitDriver>();

/**
 * Keeps an outbox event for the SQLite transaction of `adapter` holding the connection, without a statement;
 * false when the adapter is not of a group-commit SQLite store (PostgreSQL: the marker statement carries it).
 */
export function deferOnSqlite(adapter: DialectAdapter, event: DeferredEvent): boolean {
  const driver = driversByAdapter.get(adapter);
  if (!driver) return false;
  driver.defer(event);
  return true;
}

/**
 * Hands `row` to the commit of the SQLite transaction of `adapter` holding the connection (DeferredInsert);
 * false when the adapter is not of a group-commit SQLite store, where the caller inserts it itself.
 */
export function deferInsertOnSqlite(adapter: DialectAdapter, insert: DeferredInsert, row: unknown[]): boolean {
  const driver = driversByAdapter.get(adapter);
  if (!driver) return false;
  driver.deferInsert(insert, row);
  return true;
}

/** Kysely's SQLite dialect with group commit (GroupCommitDriver). */
export class GroupCommitSqliteDialect extends SqliteDialect {
  #driver: GroupCommitDriver | undefined;

  constructor(
    config: ConstructorParameters<typeof SqliteDialect>[0],
    private readonly sqliteInTransaction: () => boolean,
  ) {
    super(config);
  }

  override createDriver(): Driver {
    this.#driver = new GroupCommitDriver(super.createDriver(), this.sqliteInTransaction);
    return this.#driver;
  }

  override createAdapter(): DialectAdapter {
    const adapter = super.createAdapter();
    // Kysely creates the driver before the adapter, once per instance.
    if (this.#driver) driversByAdapter.set(adapter, this.#driver);
    return adapter;
  }
}
