import { setTimeout as sleep } from 'node:timers/promises';
import { CompiledQuery, SqliteDialect, type DatabaseConnection, type Driver, type QueryResult } from 'kysely';

/** How many transactions a group takes at most: bounds how long its first one waits for the commit. */
const GROUP_SIZE = 64;

/** How long a statement waits for another connection's write lock before it fails as busy. */
const LOCK_PATIENCE_MS = 5000;

/**
 * Runs `statement` again while SQLite answers SQLITE_BUSY (another connection holds the write lock),
 * pausing between tries, for up to LOCK_PATIENCE_MS. SQLite's own busy timeout would wait inside the
 * call and hold this thread: another connection in the same thread could then not commit the group
 * that holds the lock, and every request of this process would stand still meanwhile.
 */
function whenUnlocked<R>(statement: () => Promise<R>): Promise<R> {
  const deadline = performance.now() + LOCK_PATIENCE_MS;
  const attempt = (pause: number): Promise<R> => {
    const again = async (error: unknown): Promise<R> => {
      const busy = /^SQLITE_BUSY/.test((error as { code?: string } | undefined)?.code ?? '');
      if (!busy || performance.now() + pause > deadline) throw error;
      await sleep(pause);
      return attempt(Math.min(2 * pause, 50));
    };
    try {
      return statement().catch(again);
    } catch (error) {
      return again(error); // Kysely's SQLite connection throws at once rather than answering a rejection
    }
  };
  return attempt(1);
}

/** The transactions of one outer SQLite transaction, each answered once it commits. */
class Group {
  members = 0;
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
 * leaves the others' writes alone. The outer transaction commits at the end of the turn, or earlier
 * at GROUP_SIZE; each transaction's caller gets its answer only once that commit succeeded, or the
 * commit's failure. A query outside a transaction (a read) first commits the open group, so it never
 * sees writes that are not committed. (A transaction that waits on something else than the store
 * holds the connection, and so its group's commit, until it ends, as it held every other query.)
 *
 * The outer transaction takes the write lock at BEGIN (IMMEDIATE): a deferred one that reads and then
 * writes fails at once with "database is locked" when another process wrote in between, however long
 * it waited; an immediate one waits its turn (whenUnlocked). Every transaction here is a write.
 */
class GroupCommitDriver implements Driver {
  #group: Group | undefined;
  #commitScheduled = false;
  /** The group the current loan's transaction released its savepoint into: the loan waits for its commit. */
  #joined: Group | undefined;
  #inTransaction = false;
  /** SQLite's one connection, as the inner driver lends it. */
  #connection!: DatabaseConnection;
  /** The same, as lent out: a query outside a transaction first commits the open group. */
  #lent: DatabaseConnection | undefined;

  constructor(
    private readonly inner: Driver,
    /** Whether SQLite has a transaction open (it rolls one back by itself on some failures, e.g. a full disk). */
    private readonly sqliteInTransaction: () => boolean,
  ) {}

  init(): Promise<void> {
    return this.inner.init();
  }

  async acquireConnection(): Promise<DatabaseConnection> {
    this.#connection = await this.inner.acquireConnection();
    this.#joined = undefined;
    this.#inTransaction = false;
    this.#lent ??= {
      executeQuery: (query) =>
        this.#inTransaction
          ? this.#connection.executeQuery(query)
          : this.#outsideTransaction(() => this.#connection.executeQuery(query)),
      streamQuery: (query, chunkSize) => this.#streamCommitted(query, chunkSize),
    };
    return this.#lent;
  }

  /** A statement outside a transaction: it sees only committed writes, and may wait for the write lock. */
  #outsideTransaction<R>(statement: () => Promise<R>): Promise<R> {
    return this.#group ? this.#commit().then(() => whenUnlocked(statement)) : whenUnlocked(statement);
  }

  async *#streamCommitted<R>(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    if (this.#group && !this.#inTransaction) await this.#commit();
    yield* this.#connection.streamQuery<R>(query, chunkSize);
  }

  async beginTransaction(): Promise<void> {
    if (!this.#group) {
      await whenUnlocked(() => this.#run('begin immediate'));
      this.#group = new Group();
    }
    await this.#run('savepoint member');
    this.#group.members += 1;
    this.#inTransaction = true;
  }

  async commitTransaction(): Promise<void> {
    await this.#run('release member');
    this.#inTransaction = false;
    this.#joined = this.#group;
  }

  async rollbackTransaction(): Promise<void> {
    this.#inTransaction = false;
    if (this.sqliteInTransaction()) {
      await this.#run('rollback to member');
      await this.#run('release member');
      return;
    }
    // SQLite rolled the outer transaction back itself: the writes of the group's earlier members are gone.
    this.#group?.settle(new Error('The store rolled back the transaction these writes were grouped in.'));
    this.#group = undefined;
  }

  async releaseConnection(connection: DatabaseConnection): Promise<void> {
    const joined = this.#joined;
    this.#joined = undefined;
    const group = this.#group;
    if (group && group.members >= GROUP_SIZE) await this.#commit();
    else if (group && !this.#commitScheduled) {
      // Transactions run to their end within one turn of the event loop (SQLite answers at once), so
      // the others arrive with requests read in the same turn: the group commits after them.
      this.#commitScheduled = true;
      // (A failed rollback after a failed commit has been answered to the group's members already.)
      setImmediate(() => this.#commitWhenFree().catch(() => undefined));
    }
    await this.inner.releaseConnection(connection);
    await joined?.committed;
  }

  async #commitWhenFree(): Promise<void> {
    this.#commitScheduled = false;
    const connection = await this.inner.acquireConnection();
    try {
      if (this.#group) await this.#commit();
    } finally {
      await this.inner.releaseConnection(connection);
    }
  }

  async destroy(): Promise<void> {
    if (this.#group) await this.#commit();
    await this.inner.destroy();
  }

  async #commit(): Promise<void> {
    const group = this.#group!;
    this.#group = undefined;
    try {
      await this.#run('commit');
      group.settle();
    } catch (error) {
      group.settle(error);
      if (this.sqliteInTransaction()) await this.#run('rollback');
    }
  }

  #run(statement: string): Promise<unknown> {
    return this.#connection.executeQuery(CompiledQuery.raw(statement));
  }
}

/** Kysely's SQLite dialect with group commit (GroupCommitDriver). */
export class GroupCommitSqliteDialect extends SqliteDialect {
  constructor(
    config: ConstructorParameters<typeof SqliteDialect>[0],
    private readonly sqliteInTransaction: () => boolean,
  ) {
    super(config);
  }

  override createDriver(): Driver {
    return new GroupCommitDriver(super.createDriver(), this.sqliteInTransaction);
  }
}
