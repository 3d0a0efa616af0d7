import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { loadConfig } from '../../src/core/config.ts';
import { migrate, openStore, type Store } from '../../src/core/db/database.ts';
import { createAccount } from '../../src/core/auth/accounts.ts';
import { sql } from 'kysely';
import { emit, lastEventId, pruneEvents, readEvents } from '../../src/core/outbox.ts';

/**
 * SQLite hands outbox ids out from memory (db/group-commit.ts): the last id its connection handed out, found
 * again when another connection wrote to the file. Ids must keep growing across connections and processes
 * on one file, and across retention deleting every event (PostgreSQL takes ids from its transactions' ids).
 */
const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-outbox-ids-'));
const open = () => openStore({ ...loadConfig({}), dataDir, rememberReads: false });
let first: Store;
let second: Store;
let accountId: string;

before(async () => {
  first = open();
  await migrate(first);
  second = open();
  ({ accountId } = await createAccount(first.db, 'ids'));
});
after(async () => {
  await first?.close();
  await second?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const write = (store: Store, type: string) => emit(store.db, { accountId, type, subject: `tests/${type}` });

async function ids(store: Store): Promise<number[]> {
  return (await readEvents(store.db, accountId, 0, 1000)).events.map((event) => event.id);
}

test('two connections to one file writing in turn hand out growing ids, none twice', async () => {
  await write(first, 'a');
  await write(second, 'b');
  await write(first, 'c'); // first's last id is stale: second wrote meanwhile
  await Promise.all([write(second, 'd'), write(second, 'e'), write(first, 'f'), write(first, 'g')]);
  const seen = await ids(second);
  assert.equal(seen.length, 7);
  assert.deepEqual(
    seen,
    [...seen].sort((x, y) => x - y),
  );
  const types = (await readEvents(first.db, accountId, 0, 1000)).events.map((event) => event.type);
  assert.deepEqual(types.slice(0, 3), ['a', 'b', 'c']);
});

test('once two connections have written, each keeps the counter: one row tells the last id, not a seek per account', async () => {
  const counter = async () =>
    (await sql<{ lastId: number; shared: number }>`select last_id as "lastId", shared from outbox_counter`.execute(first.db))
      .rows[0];
  // The writes above were interleaved: the file is shared, and the counter is the last id handed out.
  assert.equal(Number((await counter()).shared), 1);
  assert.equal(Number((await counter()).lastId), Math.max(...(await ids(first))));
  // Accounts whose last event a scan would have to seek: the counter answers for all of them.
  for (let i = 0; i < 3; i += 1) {
    await write(i % 2 === 0 ? first : second, `shared ${i}`);
    assert.equal(Number((await counter()).lastId), Math.max(...(await ids(first))));
  }
  // A counter that every writer keeps is what the next writer reads: set past the events, ids go on from it.
  await sql`update outbox_counter set last_id = last_id + 1000`.execute(second.db);
  const floor = Number((await counter()).lastId);
  await write(first, 'after the counter');
  assert.equal(Math.max(...(await ids(second))), floor + 1);
});

test('after retention deleted every event, a new connection goes on past the ids handed out', async () => {
  const last = Math.max(...(await ids(first)));
  assert.ok((await pruneEvents(first.db, new Date(Date.now() + 60_000).toISOString())) >= 7);
  assert.deepEqual(await ids(first), []);
  // A client resuming after the last id it was sent is resuming after an event that happened (attack finding F1).
  assert.ok((await lastEventId(second.db, accountId)) >= last, 'the ids sent before retention still count as sent');
  await first.close();
  await second.close();
  first = open();
  second = open();
  await write(first, 'after');
  const [id] = await ids(second);
  assert.ok(id > last, `id ${id} after ${last}`);
});
