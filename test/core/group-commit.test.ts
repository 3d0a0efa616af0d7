import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import SQLite from 'better-sqlite3';
import { loadConfig } from '../../src/core/config.ts';
import { migrate, openStore, sql, type Executor, type Store } from '../../src/core/db/database.ts';
import { scratchStore } from '../helpers/harness.ts';
import { deferInsertOnSqlite, type DeferredInsert } from '../../src/core/db/group-commit.ts';

const addAccount = (db: Executor, name: string) =>
  db.insertInto('accounts').values({ id: crypto.randomUUID(), name, createdAt: new Date().toISOString() }).execute();

/** Whether an account is committed, as `other` (another connection to the file, read only) sees it. */
const committedIn = (other: SQLite.Database) => (name: string) =>
  other.prepare('select 1 from accounts where name = ?').get(name) !== undefined;

describe('group commit on SQLite: transactions of one turn share a commit, each answered once it is committed', () => {
  let store: Store;
  let drop: () => Promise<void>;
  /** A second connection to the file: another process, which sees only what is committed. */
  let other: SQLite.Database;
  let databaseFile: string;
  let next = 0;
  const uniqueName = () => `group-${(next += 1)}`;
  const committed = (name: string) => committedIn(other)(name);
  const stored = async (name: string) =>
    (await store.db.selectFrom('accounts').select('name').where('name', '=', name).executeTakeFirst()) !== undefined;

  /**
   * A transaction writing an account, grouped with `failing`: both are rejected, the account is not
   * stored, and the store takes writes again. Answers the two failures as text.
   */
  const failingTogether = async (failing: (trx: Executor) => Promise<unknown>): Promise<string[]> => {
    const name = uniqueName();
    const outcomes = await Promise.allSettled([
      store.db.transaction().execute((trx) => addAccount(trx, name)),
      store.db.transaction().execute(failing),
    ]);
    assert.deepEqual(
      outcomes.map((outcome) => outcome.status),
      ['rejected', 'rejected'],
    );
    assert.equal(await stored(name), false);
    const after = uniqueName();
    await store.db.transaction().execute((trx) => addAccount(trx, after));
    assert.equal(committed(after), true, 'the store takes writes again');
    return outcomes.map((outcome) => String((outcome as PromiseRejectedResult).reason));
  };

  before(async () => {
    const scratch = await scratchStore('sqlite');
    drop = scratch.drop;
    store = openStore({ ...loadConfig({}), ...scratch.settings });
    await migrate(store);
    await sql`create table grouped_parent (id text primary key)`.execute(store.db);
    await sql`create table grouped_child (parent text references grouped_parent (id) deferrable initially deferred)`.execute(
      store.db,
    );
    await sql`create table grouped_refused (id text)`.execute(store.db);
    await sql`create table grouped_named (name text primary key)`.execute(store.db);
    await sql`create table grouped_deferred (name text primary key, n integer)`.execute(store.db);
    await sql`create trigger grouped_refuse before insert on grouped_refused begin select raise(rollback, 'refused'); end`.execute(
      store.db,
    );
    databaseFile = path.join(scratch.settings.dataDir!, 'platform.db');
    other = new SQLite(databaseFile, { readonly: true });
  });
  after(async () => {
    other.close();
    await store.close();
    await drop();
  });

  test('transactions started together share one commit, and each answers only once its write is committed', async () => {
    const names = Array.from({ length: 20 }, uniqueName);
    let firstCommittedWhileLastRan: boolean | undefined;
    const answers = names.map((name, i) =>
      store.db
        .transaction()
        .execute(async (trx) => {
          await addAccount(trx, name);
          if (i === names.length - 1) firstCommittedWhileLastRan = committed(names[0]);
        })
        .then(() => committed(name)),
    );
    assert.deepEqual(
      await Promise.all(answers),
      names.map(() => true),
    );
    assert.equal(firstCommittedWhileLastRan, false, 'the first write was committed on its own');
  });

  test('a transaction that fails is rolled back alone', async () => {
    const [kept, failed, alsoKept] = [uniqueName(), uniqueName(), uniqueName()];
    const outcomes = await Promise.allSettled([
      store.db.transaction().execute((trx) => addAccount(trx, kept)),
      store.db.transaction().execute(async (trx) => {
        await addAccount(trx, failed);
        throw new Error('changed its mind');
      }),
      store.db.transaction().execute((trx) => addAccount(trx, alsoKept)),
    ]);
    assert.deepEqual(
      outcomes.map((outcome) => outcome.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.deepEqual([committed(kept), committed(failed), committed(alsoKept)], [true, false, true]);
  });

  test('rows handed to the group commit are written with it, those of a transaction that fails are not', async () => {
    const rows: DeferredInsert = {
      into: 'insert into grouped_deferred (name, n)',
      columns: 2,
      then: 'on conflict (name) do nothing',
      key: 1,
    };
    const defer = (trx: Executor, name: string, n: number) =>
      assert.ok(deferInsertOnSqlite(trx.getExecutor().adapter, rows, [name, n]), 'a SQLite store takes deferred rows');
    const deferred = (name: string) =>
      other.prepare('select n from grouped_deferred where name = ?').get(name) as { n: number } | undefined;
    const [kept, failed, twice] = [uniqueName(), uniqueName(), uniqueName()];
    let seenInside: unknown;
    const outcomes = await Promise.allSettled([
      store.db.transaction().execute(async (trx) => {
        defer(trx, kept, 1);
        defer(trx, twice, 2);
        // Not written yet: the transaction's own statements do not see it.
        seenInside = (await sql`select count(*) as n from grouped_deferred where name = ${kept}`.execute(trx)).rows[0];
      }),
      store.db.transaction().execute(async (trx) => {
        defer(trx, failed, 3);
        throw new Error('changed its mind');
      }),
      store.db.transaction().execute(async (trx) => defer(trx, twice, 4)),
    ]);
    assert.deepEqual(
      outcomes.map((outcome) => outcome.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.deepEqual(seenInside, { n: 0 });
    assert.deepEqual([deferred(kept)?.n, deferred(failed)?.n, deferred(twice)?.n], [1, undefined, 2]);
    assert.throws(() => deferInsertOnSqlite(store.db.getExecutor().adapter, rows, [uniqueName(), 5]), /in a transaction/);
  });

  test("a kind's committed() is told its rows once their group committed: never a failed transaction's, nor those of a commit that failed", async () => {
    const told: string[] = [];
    const rows: DeferredInsert = {
      into: 'insert into grouped_deferred (name, n)',
      columns: 2,
      then: 'on conflict (name) do nothing',
      key: 1,
      committed: (written) => told.push(...written.map((row) => row[0] as string)),
    };
    const defer = (trx: Executor, name: string) => assert.ok(deferInsertOnSqlite(trx.getExecutor().adapter, rows, [name, 1]));
    const [kept, failed, lost] = [uniqueName(), uniqueName(), uniqueName()];
    const outcomes = await Promise.allSettled([
      store.db
        .transaction()
        .execute(async (trx) => defer(trx, kept))
        .then(() => told.includes(kept)),
      store.db.transaction().execute(async (trx) => {
        defer(trx, failed);
        throw new Error('changed its mind');
      }),
    ]);
    assert.deepEqual(
      outcomes.map((outcome) => outcome.status),
      ['fulfilled', 'rejected'],
    );
    assert.equal((outcomes[0] as PromiseFulfilledResult<boolean>).value, true, 'told before the transaction is answered');
    // A deferred foreign key is checked at COMMIT: the group's commit fails, and nothing of it is told.
    const failures = await Promise.allSettled([
      store.db.transaction().execute(async (trx) => defer(trx, lost)),
      store.db.transaction().execute((trx) => sql`insert into grouped_child (parent) values ('none')`.execute(trx)),
    ]);
    assert.deepEqual(
      failures.map((outcome) => outcome.status),
      ['rejected', 'rejected'],
    );
    assert.deepEqual(told, [kept]);
  });

  test('a read outside a transaction commits the open group before it reads', async () => {
    const name = uniqueName();
    let read: Promise<boolean> | undefined;
    await store.db.transaction().execute(async (trx) => {
      await addAccount(trx, name);
      // Runs as soon as this transaction lets go of the connection, before the group's own commit.
      read = stored(name).then((found) => found && committed(name));
    });
    assert.equal(await read, true);
  });

  test('a commit that fails fails every transaction of its group, and their writes are gone', async () => {
    // A deferred foreign key is checked at COMMIT: the group's commit fails.
    const [reason] = await failingTogether((trx) => sql`insert into grouped_child (parent) values ('none')`.execute(trx));
    assert.match(reason, /FOREIGN KEY/);
  });

  test("a transaction failed by another one's write is answered with the group's failure when that write is never committed", async () => {
    const name = uniqueName();
    const insertNamed = (db: Executor) => sql`insert into grouped_named (name) values (${name})`.execute(db);
    const outcomes = await Promise.allSettled([
      store.db.transaction().execute(insertNamed),
      // The name is taken by the first one's write, which is not committed yet ...
      store.db.transaction().execute(insertNamed),
      // ... and never will be: this one fails the group's commit.
      store.db.transaction().execute((trx) => sql`insert into grouped_child (parent) values ('none')`.execute(trx)),
    ]);
    const reasons = outcomes.map((outcome) => String((outcome as PromiseRejectedResult).reason));
    assert.match(reasons[1], /FOREIGN KEY/, 'told the name is taken by a write that never was');
    assert.deepEqual(
      reasons.map((reason) => /FOREIGN KEY/.test(reason)),
      [true, true, true],
    );
  });

  test('when SQLite rolls the whole group back, its earlier transactions fail too', async () => {
    const [earlier, refused] = await failingTogether((trx) => sql`insert into grouped_refused (id) values ('x')`.execute(trx));
    assert.match(earlier, /rolled back/);
    assert.match(refused, /refused/);
  });

  test('a write lock held by another connection is waited for without holding the thread or the reads', async () => {
    const writer = new SQLite(databaseFile);
    const name = uniqueName();
    try {
      writer.exec('begin immediate');
      let done = false;
      const write = store.db
        .transaction()
        .execute((trx) => addAccount(trx, name))
        .then(() => (done = true));
      // A timer fires meanwhile: SQLite's own busy wait would hold the thread until the lock came free.
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(done, false, 'the write waits for the lock');
      // Reads need no lock: they are answered meanwhile, not queued behind the waiting write.
      assert.equal(await stored(name), false);
      assert.equal(done, false);
      writer.exec('commit');
      await write;
      assert.equal(committed(name), true);
    } finally {
      writer.close();
    }
  });

  test('two connections in one thread writing at once each wait for the other rather than failing', async () => {
    // (SQLite's lock is not fair: a connection that writes without pause can keep another waiting past the patience.)
    const second = openStore({ ...loadConfig({}), dataDir: path.dirname(databaseFile), databaseUrl: undefined });
    try {
      const names = Array.from({ length: 40 }, uniqueName);
      const outcomes = await Promise.allSettled(
        names.map((name, i) => (i % 2 ? second : store).db.transaction().execute((trx) => addAccount(trx, name))),
      );
      assert.deepEqual(
        outcomes.filter((outcome) => outcome.status === 'rejected'),
        [],
      );
      assert.equal(names.filter(committed).length, names.length);
    } finally {
      await second.close();
    }
  });

  test('a write lock held past the patience fails the write as busy, writing nothing', async () => {
    const writer = new SQLite(databaseFile);
    const name = uniqueName();
    try {
      writer.exec('begin immediate');
      await assert.rejects(
        store.db.transaction().execute((trx) => addAccount(trx, name)),
        (error: { code?: string }) => error.code === 'SQLITE_BUSY',
      );
    } finally {
      writer.exec('rollback');
      writer.close();
    }
    assert.equal(await stored(name), false);
  });

  test("Kysely's other ways in answer only once committed too: a controlled transaction, one on a held connection", async () => {
    const [controlled, onConnection] = [uniqueName(), uniqueName()];
    const trx = await store.db.startTransaction().execute();
    await addAccount(trx, controlled);
    await trx.commit().execute();
    assert.equal(committed(controlled), true, 'commit() answered before the write was committed');
    await store.db.connection().execute(async (connection) => {
      await connection.transaction().execute((inner) => addAccount(inner, onConnection));
      assert.equal(committed(onConnection), true, 'the transaction answered before its write was committed');
    });
  });

  test('savepoints within a (controlled) transaction roll back only their part', async () => {
    const [kept, undone] = [uniqueName(), uniqueName()];
    const trx = await store.db.startTransaction().execute();
    await addAccount(trx, kept);
    const savepoint = await trx.savepoint('part').execute();
    await addAccount(savepoint, undone);
    await savepoint.rollbackToSavepoint('part').execute();
    await trx.commit().execute();
    assert.deepEqual([committed(kept), committed(undone)], [true, false]);
  });

  test('many transactions at once all commit, in groups of bounded size', async () => {
    const names = Array.from({ length: 500 }, uniqueName);
    await Promise.all(names.map((name) => store.db.transaction().execute((trx) => addAccount(trx, name))));
    assert.equal(names.filter(committed).length, names.length);
  });
});

describe('group commit on SQLite: closing the store', () => {
  test('a transaction half done when the store closes leaves nothing, and its group is told so', async () => {
    const scratch = await scratchStore('sqlite');
    const store = openStore({ ...loadConfig({}), ...scratch.settings });
    const other = new SQLite(path.join(scratch.settings.dataDir!, 'platform.db'), { readonly: true });
    try {
      await migrate(store);
      const committed = committedIn(other);
      const whole = store.db.transaction().execute((trx) => addAccount(trx, 'whole'));
      const halfDone = store.db.transaction().execute(async (trx) => {
        await addAccount(trx, 'half-1');
        await new Promise((resolve) => setTimeout(resolve, 50));
        await addAccount(trx, 'half-2');
      });
      await new Promise((resolve) => setTimeout(resolve, 10));
      await store.close();
      const outcomes = await Promise.allSettled([whole, halfDone]);
      assert.deepEqual(
        outcomes.map((outcome) => outcome.status),
        ['rejected', 'rejected'],
      );
      assert.deepEqual([committed('whole'), committed('half-1'), committed('half-2')], [false, false, false]);
    } finally {
      other.close();
      await scratch.drop();
    }
  });
});
