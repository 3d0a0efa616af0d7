import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadConfig } from '../../src/core/config.ts';
import { migrate, openStore, sql, type Store } from '../../src/core/db/database.ts';
import { preparedQuery } from '../../src/core/db/prepared.ts';
import { describeEachStore, scratchStore } from '../helpers/harness.ts';

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
