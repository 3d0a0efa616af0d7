import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { sql } from 'kysely';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { emit } from '../../src/core/outbox.ts';
import { writeContext, type PendingWriteEvent } from '../../src/core/db/deferred-events.ts';

/** Issue 33: an event is written in the transaction of its change, audited API writes included. */
/** The pending event of an audited write of `type`, as the audit plugin hands it to the request's transactions. */
function pendingWriteEvent(accountId: string, type: string): PendingWriteEvent {
  return {
    event: () => ({ accountId, type, projectId: null, subject: 'tests', data: '{}', occurredAt: new Date().toISOString() }),
    written: false,
    committing: false,
    closed: false,
  };
}

describeEachStore('outbox events go with their transaction', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
    // A project named "fails-at-commit" is refused by the store after its row was written: on PostgreSQL at
    // the commit (a deferred constraint trigger, after the outbox rows of the same commit), on SQLite at the end
    // of the insert statement (an AFTER trigger).
    if (kind === 'postgres') {
      await sql`create function refuse_project() returns trigger language plpgsql as $$
        begin if new.name = 'fails-at-commit' then raise exception 'refused at commit'; end if; return new; end $$`.execute(
        server.db,
      );
      await sql`create constraint trigger refuse_project after insert on projects deferrable initially deferred
        for each row execute function refuse_project()`.execute(server.db);
    } else {
      await sql`create trigger refuse_project after insert on projects when new.name = 'fails-at-commit'
        begin select raise(abort, 'refused after the insert'); end`.execute(server.db);
    }
  });
  after(async () => {
    await sql`drop trigger if exists refuse_project ${sql.raw(kind === 'postgres' ? 'on projects' : '')}`.execute(server.db);
    await server.close();
  });

  const eventsOf = (accountId: string, type?: string) => {
    let query = server.db.selectFrom('outboxEvents').selectAll().where('accountId', '=', accountId);
    if (type) query = query.where('type', '=', type);
    return query.orderBy('id').execute();
  };

  test('a successful audited write has exactly one event, naming what it created', async () => {
    const answer = await server.api('POST', '/projects', { token: caller.token, body: { name: `p-${randomUUID()}` } });
    assert.equal(answer.status, 201);
    const events = (await eventsOf(caller.accountId, 'projects.created')).filter(
      (event) => JSON.parse(event.data).resourceIds.projectId === answer.body.projectId,
    );
    assert.equal(events.length, 1);
    const projectId = answer.body.projectId as string;
    for (const name of ['a', 'b']) {
      const created = await server.api('POST', `/projects/${projectId}/environments`, {
        token: caller.token,
        body: { name },
      });
      assert.equal(created.status, 201);
    }
    const deleted = await server.api('DELETE', `/projects/${projectId}/environments/a`, { token: caller.token });
    assert.equal(deleted.status, 204);
    const environmentEvents = (await eventsOf(caller.accountId)).filter((event) => event.type.startsWith('environments.'));
    assert.deepEqual(
      environmentEvents.map((event) => [event.type, JSON.parse(event.data).resourceIds.environmentName]),
      [
        ['environments.created', 'a'],
        ['environments.created', 'b'],
        ['environments.deleted', 'a'],
      ],
    );
  });

  test('a write whose transaction fails after the change leaves no event (and no row)', async () => {
    const before = (await eventsOf(caller.accountId)).length;
    const answer = await server.api('POST', '/projects', { token: caller.token, body: { name: 'fails-at-commit' } });
    assert.equal(answer.status, 500);
    assert.equal((await eventsOf(caller.accountId)).length, before);
    const rows = await server.db.selectFrom('projects').select('id').where('name', '=', 'fails-at-commit').execute();
    assert.equal(rows.length, 0);
  });

  test('emit() in a transaction that rolls back writes nothing; one that commits writes its events in order', async () => {
    const accountId = caller.accountId;
    const before = (await eventsOf(accountId)).length;
    await assert.rejects(
      server.db.transaction().execute(async (trx) => {
        await emit(trx, { accountId, type: 'test.rolled-back', subject: 'tests/1' });
        throw new Error('after the change');
      }),
      /after the change/,
    );
    assert.equal((await eventsOf(accountId)).length, before);
    await server.db.transaction().execute(async (trx) => {
      await emit(trx, { accountId, type: 'test.first', subject: 'tests/2' });
      await emit(trx, { accountId, type: 'test.second', subject: 'tests/2' });
    });
    const after = await eventsOf(accountId);
    assert.deepEqual(
      after.slice(before).map((event) => event.type),
      ['test.first', 'test.second'],
    );
    assert.ok(after[after.length - 1].id > after[after.length - 2].id);
  });

  test('a transaction writes any number of events (past 4,095, a PostgreSQL id block), with its audited event first, in order', async () => {
    const accountId = caller.accountId;
    const count = 10_000;
    const pending = pendingWriteEvent(accountId, 'tests.many');
    const before = (await eventsOf(accountId)).length;
    await writeContext.run(pending, () =>
      server.db.transaction().execute(async (trx) => {
        await trx
          .insertInto('projects')
          .values({
            id: randomUUID(),
            accountId,
            name: `many-${randomUUID()}`,
            description: null,
            createdBy: 'test',
            createdAt: '',
          })
          .execute();
        for (let i = 0; i < count; i += 1) await emit(trx, { accountId, type: 'test.many', subject: `tests/${i}` });
      }),
    );
    const written = (await eventsOf(accountId)).slice(before);
    assert.equal(written.length, count + 1);
    assert.deepEqual(
      written.map((event) => event.subject),
      ['tests', ...Array.from({ length: count }, (_, i) => `tests/${i}`)],
    );
    assert.ok(written.every((event) => Number.isSafeInteger(Number(event.id))));
    assert.equal(new Set(written.map((event) => Number(event.id))).size, count + 1);
  });

  test('an event with quotes, backslashes and other characters in its fields is stored as written', async () => {
    const accountId = caller.accountId;
    const data = { message: "it's \"quoted\" \\ back\\slashed \\' and 'E'' \n ünïcödé 🎉", path: 'C:\\runs\\x' };
    await server.db
      .transaction()
      .execute((trx) => emit(trx, { accountId, type: "test.it's", subject: "tests/o'brien\\1", data }));
    const [event] = (await eventsOf(accountId, "test.it's")).slice(-1);
    assert.equal(event.subject, "tests/o'brien\\1");
    assert.deepEqual(JSON.parse(event.data), data);
  });

  test("a pending write event goes with the first of the request's transactions that changes something, once", async () => {
    const accountId = caller.accountId;
    const pending = pendingWriteEvent(accountId, 'tests.created');
    const count = async () => (await eventsOf(accountId, 'tests.created')).length;
    await writeContext.run(pending, async () => {
      // Reads only: nothing to announce.
      await server.db.transaction().execute((trx) => trx.selectFrom('projects').select('id').execute());
      assert.equal(await count(), 0);
      // Changes, then fails: rolled back with its change.
      await assert.rejects(
        server.db.transaction().execute(async (trx) => {
          await trx
            .insertInto('projects')
            .values({
              id: randomUUID(),
              accountId,
              name: `x-${randomUUID()}`,
              description: null,
              createdBy: 'test',
              createdAt: '',
            })
            .execute();
          throw new Error('after the change');
        }),
      );
      assert.equal(await count(), 0);
      assert.equal(pending.written, false);
      // Changes and commits: the event goes with it, and with no later transaction.
      for (let i = 0; i < 2; i += 1) {
        await server.db.transaction().execute((trx) =>
          trx
            .insertInto('projects')
            .values({
              id: randomUUID(),
              accountId,
              name: `y-${randomUUID()}`,
              description: null,
              createdBy: 'test',
              createdAt: '',
            })
            .execute(),
        );
      }
    });
    assert.equal(pending.written, true);
    assert.equal(await count(), 1);
  });
});
