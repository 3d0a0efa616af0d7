import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadConfig } from '../../src/core/config.ts';
import { migrate, openStore, sql, type Store } from '../../src/core/db/database.ts';
import { preparedQuery } from '../../src/core/db/prepared.ts';
import { describeEachStore, describeOnPostgres, scratchStore } from '../helpers/harness.ts';

describeEachStore('preparedQuery: compiled once, run with new values', (kind) => {
  let store: Store;
  let drop: () => Promise<void>;
  const accountNamed = preparedQuery((db, params: { name: string }) =>
    db.selectFrom('accounts').select(['id', 'name']).where('name', '=', params.name),
  );

  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    store = openStore({ ...loadConfig({}), ...scratch.settings });
    await migrate(store);
    for (const name of ['first', 'second']) {
      await store.db
        .insertInto('accounts')
        .values({ id: crypto.randomUUID(), name, createdAt: new Date().toISOString() })
        .execute();
    }
  });
  after(async () => {
    await store.close();
    await drop();
  });

  test('each run binds its own values, on the database and in a transaction', async () => {
    assert.deepEqual(
      (await accountNamed(store.db, { name: 'first' })).map((row) => row.name),
      ['first'],
    );
    assert.deepEqual(
      (await accountNamed(store.db, { name: 'second' })).map((row) => row.name),
      ['second'],
    );
    assert.deepEqual(await accountNamed(store.db, { name: "' or 1=1 --" }), []);
    await store.db.transaction().execute(async (trx) => {
      assert.equal((await accountNamed(trx, { name: 'first' })).length, 1);
    });
  });

  if (kind === 'postgres') {
    test('PostgreSQL: a named statement outlived by a change of a column it returns still answers', async () => {
      // Prepare the statement on every pooled connection, then change the type of a column it returns:
      // each of those connections now holds a plan PostgreSQL refuses to reuse (0A000).
      await Promise.all(Array.from({ length: 10 }, () => accountNamed(store.db, { name: 'first' })));
      await sql`alter table accounts alter column name type varchar(500)`.execute(store.db);
      for (let i = 0; i < 12; i += 1) {
        assert.deepEqual(
          (await accountNamed(store.db, { name: 'second' })).map((row) => row.name),
          ['second'],
        );
      }
    });
  }
});

describeOnPostgres('named statements: a stale plan and connection options', () => {
  let store: Store;
  let settings: { databaseUrl?: string; dataDir?: string };
  let drop: () => Promise<void>;
  const accountNamed = preparedQuery((db, params: { name: string }) =>
    db.selectFrom('accounts').select(['id', 'name']).where('name', '=', params.name),
  );

  before(async () => {
    const scratch = await scratchStore('postgres');
    drop = scratch.drop;
    settings = scratch.settings;
    store = openStore({ ...loadConfig({}), ...settings });
    await migrate(store);
    await store.db
      .insertInto('accounts')
      .values({ id: crypto.randomUUID(), name: 'first', createdAt: new Date().toISOString() })
      .execute();
  });
  after(async () => {
    await store.close();
    await drop();
  });

  test('a named statement outlived by a column type change still answers inside a transaction (as writeInProject runs requireProject)', async () => {
    // Every pooled connection prepares the statement; then a migration (another process) changes a returned column's type.
    await Promise.all(Array.from({ length: 10 }, () => accountNamed(store.db, { name: 'first' })));
    await sql`alter table accounts alter column name type varchar(400)`.execute(store.db);
    const failures: string[] = [];
    for (let i = 0; i < 12; i += 1) {
      try {
        await store.db.transaction().execute(async (trx) => {
          assert.equal((await accountNamed(trx, { name: 'first' })).length, 1);
        });
      } catch (error) {
        failures.push(`${(error as { code?: string }).code}: ${(error as Error).message}`);
      }
    }
    assert.deepEqual(failures, [], 'transactions failed on a stale plan instead of falling back');
  });

  test('plan_cache_mode=force_custom_plan is set even when the URL carries its own options', async () => {
    const url = new URL(settings.databaseUrl!);
    url.searchParams.set('options', '-c statement_timeout=5000');
    const other = openStore({ ...loadConfig({}), ...settings, databaseUrl: url.toString() });
    try {
      const { rows } = await sql<{
        mode: string;
        timeout: string;
      }>`select current_setting('plan_cache_mode') as mode, current_setting('statement_timeout') as timeout`.execute(other.db);
      assert.equal(rows[0].timeout, '5s', "the URL's own options apply");
      assert.equal(rows[0].mode, 'force_custom_plan', 'the URL options silently replaced plan_cache_mode');
    } finally {
      await other.close();
    }
  });

  test('a connection lost while lent out (between two statements of a transaction) fails that transaction, not the process', async () => {
    const lost: Error[] = [];
    const other = openStore({ ...loadConfig({}), ...settings });
    other.onConnectionLost = (error) => lost.push(error);
    try {
      await assert.rejects(
        other.db.transaction().execute(async (trx) => {
          const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
          await sql`select pg_terminate_backend(${rows[0].pid})`.execute(store.db);
          // The connection's error arrives while no statement of it runs: with no listener it was thrown.
          for (let i = 0; i < 100 && lost.length === 0; i += 1) await new Promise((resolve) => setTimeout(resolve, 10));
          await sql`select 1`.execute(trx);
        }),
      );
      assert.ok(lost.length > 0, 'the loss was told');
      assert.equal((await sql<{ one: number }>`select 1 as one`.execute(other.db)).rows[0].one, 1, 'the pool answers again');
    } finally {
      await other.close();
    }
  });

  test('after a change of a returned column type, connections holding the older statements are replaced as they are used', async () => {
    const other = openStore({ ...loadConfig({}), ...settings });
    // The backend of each of the pool's 10 connections, all lent at once.
    const backends = async () => {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const pids: number[] = [];
      const holders = Array.from({ length: 10 }, () =>
        other.db.transaction().execute(async (trx) => {
          pids.push((await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx)).rows[0].pid);
          await gate;
        }),
      );
      while (pids.length < 10) await new Promise((resolve) => setTimeout(resolve, 10));
      release();
      await Promise.all(holders);
      return pids;
    };
    try {
      await Promise.all(Array.from({ length: 10 }, () => accountNamed(other.db, { name: 'first' }))); // prepared on each
      const before = await backends();
      await sql`alter table accounts alter column name type text`.execute(store.db);
      assert.equal((await accountNamed(other.db, { name: 'first' })).length, 1); // 0A000, run again: a new generation
      await backends(); // each older connection's last loan
      const after = await backends();
      assert.deepEqual(
        after.filter((pid) => before.includes(pid)),
        [],
        'connections kept the statements of the older generation',
      );
    } finally {
      await other.close();
    }
  });

  test("the operator's PGOPTIONS still apply (as before named statements)", async () => {
    const saved = process.env.PGOPTIONS;
    process.env.PGOPTIONS = '-c statement_timeout=7000';
    const other = openStore({ ...loadConfig({}), ...settings });
    try {
      const { rows } = await sql<{ timeout: string }>`select current_setting('statement_timeout') as timeout`.execute(other.db);
      assert.equal(rows[0].timeout, '7s', 'PGOPTIONS (e.g. a statement_timeout or search_path) is ignored now');
    } finally {
      if (saved === undefined) delete process.env.PGOPTIONS;
      else process.env.PGOPTIONS = saved;
      await other.close();
    }
  });
});
