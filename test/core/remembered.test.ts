import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import SQLite from 'better-sqlite3';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../../src/core/config.ts';
import { migrate, openStore, readVersion, sql, type Executor, type Store } from '../../src/core/db/database.ts';
import { createAccount } from '../../src/core/auth/accounts.ts';
import { createProject } from '../../src/areas/projects/service.ts';
import { createEnvironment, listEnvironments } from '../../src/areas/environments/service.ts';
import { rememberedRead, serializingKeptAnswersOnce } from '../../src/core/db/remembered.ts';
import { describeEachStore, describeOnPostgres, scratchStore, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('rememberedRead: answers given again only while the store is unchanged', (kind) => {
  let stores: [Store, Store];
  let drop: () => Promise<void>;
  let dataDir: string;
  let reads = 0;
  // Counts how often the store is really asked, and answers the accounts' names.
  const names = rememberedRead(async (db: Executor, prefix: string) => {
    reads += 1;
    const rows = await db.selectFrom('accounts').select('name').where('name', 'like', `${prefix}%`).orderBy('name').execute();
    return rows.map((row) => row.name);
  });
  const addAccount = (db: Executor, name: string) =>
    db.insertInto('accounts').values({ id: crypto.randomUUID(), name, createdAt: new Date().toISOString() }).execute();

  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    const config = { ...loadConfig({}), ...scratch.settings };
    dataDir = config.dataDir;
    // Two connections to one store: two server processes as far as the store can tell.
    stores = [openStore(config), openStore(config)];
    await migrate(stores[0]);
  });
  after(async () => {
    await Promise.all(stores.map((store) => store.close()));
    await drop();
  });

  test('a write through this connection or another one is seen by the next read', async () => {
    const [mine, other] = stores.map((store) => store.db);
    await addAccount(mine, 'seen-a');
    assert.deepEqual(await names(mine, 'seen-'), ['seen-a']);
    await addAccount(mine, 'seen-b');
    assert.deepEqual(await names(mine, 'seen-'), ['seen-a', 'seen-b']);
    await addAccount(other, 'seen-c');
    assert.deepEqual(await names(mine, 'seen-'), ['seen-a', 'seen-b', 'seen-c']);
    await other.deleteFrom('accounts').where('name', '=', 'seen-a').execute();
    assert.deepEqual(await names(mine, 'seen-'), ['seen-b', 'seen-c']);
  });

  test('an unchanged store answers from memory, per arguments, with a frozen answer', async () => {
    const db = stores[0].db;
    await addAccount(db, 'kept-a');
    // On PostgreSQL a write anywhere on the server (another test's) changes the version: try until none lands between.
    const answeredFromMemory = async (prefix: string) => {
      for (let attempt = 0; attempt < 50; attempt += 1) {
        await names(db, prefix);
        const before = reads;
        const answer = await names(db, prefix);
        if (reads === before) return answer;
      }
      assert.fail(`every read of "${prefix}" asked the store again`);
    };
    const answer = await answeredFromMemory('kept-');
    assert.ok(Object.isFrozen(answer));
    assert.throws(() => (answer as string[]).push('x'), TypeError);
    const before = reads;
    await names(db, 'other-');
    assert.equal(reads, before + 1, 'other arguments are another read');
    // A statement that changes no row changes nothing: the answer stays.
    await answeredFromMemory('kept-');
    for (let attempt = 0; ; attempt += 1) {
      const before = reads;
      await db.updateTable('accounts').set({ name: 'never' }).where('name', '=', 'no such account').execute();
      await names(db, 'kept-');
      if (reads === before) break;
      assert.ok(kind === 'postgres' && attempt < 50, 'a statement that changed no row made the next read ask the store');
    }
  });

  test('a kept answer is serialized once per serializer, a new answer anew, anything else every time', async () => {
    const db = stores[0].db;
    await addAccount(db, 'json-a');
    const calls = { plain: 0, bracketed: 0 };
    const counting = (name: keyof typeof calls, serialize: (data: unknown) => string) => (data: unknown) => {
      calls[name] += 1;
      return serialize(data);
    };
    const plain = serializingKeptAnswersOnce(counting('plain', (data) => JSON.stringify(data)));
    const bracketed = serializingKeptAnswersOnce(counting('bracketed', (data) => `[${JSON.stringify(data)}]`));
    // On PostgreSQL another test's write may change the version: try until two reads share one answer.
    const keptAnswer = async () => {
      for (let attempt = 0; attempt < 50; attempt += 1) {
        const [first, second] = [await names(db, 'json-'), await names(db, 'json-')];
        if (first === second) return first;
      }
      assert.fail('no read was answered from memory');
    };
    const kept = await keptAnswer();
    for (let i = 0; i < 3; i += 1) {
      assert.equal(plain(kept), '["json-a"]');
      assert.equal(bracketed(kept), '[["json-a"]]');
    }
    assert.deepEqual(calls, { plain: 1, bracketed: 1 }, 'each serializer serialized the kept answer once');
    await addAccount(stores[1].db, 'json-b');
    assert.equal(plain(await names(db, 'json-')), '["json-a","json-b"]');
    assert.equal(calls.plain, 2, 'the answer after a write is serialized anew');
    const fresh = ['json-a'];
    plain(fresh);
    plain(fresh);
    assert.equal(calls.plain, 4, 'what no remembered read kept is serialized every time');
  });

  test('inside a transaction nothing is remembered: it sees its own writes', async () => {
    const db = stores[0].db;
    await names(db, 'trx-');
    await db.transaction().execute(async (trx) => {
      assert.equal(readVersion(trx), undefined);
      await addAccount(trx, 'trx-a');
      assert.deepEqual(await names(trx, 'trx-'), ['trx-a']);
    });
    assert.deepEqual(await names(db, 'trx-'), ['trx-a']);
  });

  test('a write that another connection commits while this one reads is not hidden by the read', async () => {
    const [mine, other] = stores.map((store) => store.db);
    // The version is taken before the read: a commit landing during the read makes the answer stale at once.
    const slow = rememberedRead(async (db: Executor) => {
      const rows = await db.selectFrom('accounts').select('name').where('name', 'like', 'race-%').execute();
      await addAccount(other, `race-${rows.length}`);
      return rows.length;
    });
    assert.equal(await slow(mine), 0);
    assert.equal(await slow(mine), 1, 'read again, not given the answer from before the commit');
  });

  test(
    kind === 'sqlite'
      ? 'SQLite: reads that ask in one turn share one read of the version, made after they all asked'
      : 'PostgreSQL: reads that ask together share one version query; one that asks after it was sent waits for the next',
    async () => {
      const [mine, other] = stores.map((store) => store.db);
      if (kind === 'sqlite') {
        const first = readVersion(mine);
        assert.ok(first instanceof Promise);
        assert.equal(readVersion(mine), first, 'asked in the same turn: one read');
        const before = await first;
        assert.notEqual(readVersion(mine), first, 'asked after the read: a read of its own');
        // A commit by another process after a read asked, within the same turn, is in the version it gets.
        const asked = readVersion(mine);
        const otherProcess = new SQLite(path.join(dataDir, 'platform.db'));
        try {
          otherProcess
            .prepare('insert into accounts (id, name, created_at) values (?, ?, ?)')
            .run(crypto.randomUUID(), 'committed-after-asking', new Date().toISOString());
        } finally {
          otherProcess.close();
        }
        assert.notEqual(await asked, before, 'the version read missed a commit made after the read asked');
        return;
      }
      const first = readVersion(mine);
      assert.ok(first instanceof Promise);
      assert.equal(readVersion(mine), first, 'asked in the same turn: one query');
      await new Promise(setImmediate); // the first version's query is now on its way
      const second = readVersion(mine);
      assert.notEqual(second, first, 'asked after the query was sent: a query of its own');
      assert.equal(readVersion(mine), second, 'reads asking while one query is on its way share the next');
      assert.match(String(await second), / \d+:\d+:/);
      // A commit between two versions (one that a client may know of before it asks) changes the version.
      const before = await readVersion(mine);
      await addAccount(other, 'moved');
      assert.notEqual(await readVersion(mine), before);
      // A restored backup or a promoted standby hands out the same transaction ids again over other data
      // (shown by a reviewer on a private cluster): the server's start, new after either, is part of the version.
      const { rows } = await sql<{ started: string }>`select pg_postmaster_start_time()::text as started`.execute(mine);
      assert.ok(String(await readVersion(mine)).startsWith(`${rows[0].started} `));
    },
  );
});

describeOnPostgres('remembered reads: the snapshot query under a busy pool and a dead connection', () => {
  let store: Store;
  let drop: () => Promise<void>;
  // PostgreSQL reached through a proxy on 127.0.0.1 that can stop passing bytes: a connection gone dead without a word.
  let frozen = false;
  const stalled: (() => void)[] = [];
  const proxy = net.createServer((inbound) => {
    const outbound = net.connect(Number(new URL(process.env.TEST_DATABASE_URL!).port || 5432), '127.0.0.1');
    const pass = (from: net.Socket, to: net.Socket) =>
      from.on('data', (chunk) => (frozen ? stalled.push(() => to.write(chunk)) : to.write(chunk)));
    pass(inbound, outbound);
    pass(outbound, inbound);
    const close = () => (inbound.destroy(), outbound.destroy());
    inbound.on('error', close).on('close', close);
    outbound.on('error', close).on('close', close);
  });
  before(async () => {
    const scratch = await scratchStore('postgres');
    drop = scratch.drop;
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const url = new URL(scratch.settings.databaseUrl!);
    url.hostname = '127.0.0.1';
    url.port = String((proxy.address() as net.AddressInfo).port);
    store = openStore({ ...loadConfig({}), ...scratch.settings, databaseUrl: url.toString() });
  });
  after(async () => {
    frozen = false;
    for (const write of stalled.splice(0)) write();
    await store.close();
    proxy.close();
    await drop();
  });

  test(
    'reads get versions while every pooled connection is busy (the query has a connection of its own)',
    { timeout: 10_000 },
    async () => {
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const holders = Array.from({ length: 10 }, () => store.db.transaction().execute(() => gate));
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.match(String(await readVersion(store.db)), / \d+:\d+:/);
      release();
      await Promise.all(holders);
    },
  );

  test(
    'a dead connection holds reads up about a second; then they ask the store themselves, and later reads get versions again',
    { timeout: 10_000 },
    async () => {
      assert.match(String(await readVersion(store.db)), / \d+:\d+:/);
      frozen = true;
      const started = Date.now();
      const [first, second] = [readVersion(store.db), (await new Promise(setImmediate), readVersion(store.db))];
      assert.equal(await first, undefined);
      assert.equal(await second, undefined);
      const waited = Date.now() - started;
      assert.ok(waited >= 900 && waited < 2500, `waited ${waited} ms (a read asking behind one on its way waits no longer)`);
      frozen = false;
      for (const write of stalled.splice(0)) write();
      assert.match(String(await readVersion(store.db)), / \d+:\d+:/);
    },
  );
});

describe('remembered reads: every change by this connection is a change [sqlite]', () => {
  let store: Store;
  let drop: () => Promise<void>;
  let accountId: string;
  let projectId: string;
  before(async () => {
    const scratch = await scratchStore('sqlite');
    drop = scratch.drop;
    store = openStore({ ...loadConfig({}), ...scratch.settings });
    await migrate(store);
    ({ accountId } = await createAccount(store.db, 'ddl'));
    projectId = await createProject(store.db, accountId, 'someone', { name: 'p' });
    for (const name of ['kept', 'gone']) await createEnvironment(store.db, accountId, projectId, { name } as never);
  });
  after(async () => {
    await store.close();
    await drop();
  });

  test('a table replaced by DDL on this connection (rename away, create ... as select) is seen by the next read', async () => {
    const page = { page: 0, size: 25 };
    const names = async () => (await listEnvironments(store.db, accountId, projectId, page)).results.map((e) => e.name);
    assert.deepEqual(await names(), ['gone', 'kept']);
    // A table swapped by DDL: neither statement reports a changed row, so the read version stays.
    await sql`alter table environments rename to environments_before`.execute(store.db);
    await sql`create table environments as select * from environments_before where name <> 'gone'`.execute(store.db);
    const direct = await store.db.selectFrom('environments').select('name').execute();
    assert.deepEqual(
      direct.map((r) => r.name),
      ['kept'],
    );
    assert.deepEqual(await names(), ['kept'], 'the remembered page from before the rebuild was given again');
  });
});

describe('remembered reads: unknown query fields must not defeat or flood the memory [sqlite]', () => {
  let server: TestServer;
  let caller: Caller;
  let queries = 0;
  before(async () => {
    server = await TestServer.start('sqlite');
    caller = await server.newAccount();
    await server.newProject(caller);
    const store = server.server.app.store;
    const told = store.onQuery;
    store.onQuery = (ms, failed) => {
      queries += 1;
      told?.(ms, failed);
    };
  });
  after(async () => {
    await server.close();
  });

  test('the same page asked with an unknown query parameter is the same remembered answer (no store read per junk value)', async () => {
    const list = (suffix: string) => server.api('GET', `/projects${suffix}`, { token: caller.token });
    assert.equal((await list('')).status, 200);
    let before = queries;
    assert.equal((await list('')).status, 200);
    const baseline = queries - before; // what a remembered answer costs (token checks etc.)
    before = queries;
    for (let i = 0; i < 5; i += 1) assert.equal((await list(`?x${i}=${'a'.repeat(1000)}`)).status, 200);
    // Each distinct unknown field became its own key (and its own 1000+ characters of the bounded memory).
    assert.equal(queries - before, 5 * baseline, 'every request with a new junk parameter read the store again');
    before = queries;
    assert.equal((await list('?size=25&page=0')).status, 200, 'same page, other order');
    assert.equal(queries - before, baseline, 'the same page spelled in another order read the store again');
  });
});
