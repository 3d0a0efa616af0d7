import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { DAY_MS, SEALED_AFTER_MS, windowPieces } from '../../src/areas/lineage/days.ts';
import { seedLineageSteps } from '../helpers/lineage-rows.ts';

const HOUR_MS = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();

describe('a lineage window cut into pieces', () => {
  const midnight = Date.parse('2026-11-20T00:00:00.000Z');
  const now = midnight + 10 * HOUR_MS;

  test('whole days sealed an hour after their end are kept; partial days and days not yet sealed are counted', () => {
    const pieces = windowPieces(midnight - 2 * DAY_MS - 6 * HOUR_MS, now, now).map((piece) => ({
      from: iso(piece.from),
      before: iso(piece.before),
      day: piece.day,
    }));
    assert.deepEqual(pieces, [
      { from: '2026-11-17T18:00:00.000Z', before: '2026-11-18T00:00:00.000Z', day: undefined },
      { from: '2026-11-18T00:00:00.000Z', before: '2026-11-19T00:00:00.000Z', day: '2026-11-18' },
      { from: '2026-11-19T00:00:00.000Z', before: '2026-11-20T00:00:00.000Z', day: '2026-11-19' },
      { from: '2026-11-20T00:00:00.000Z', before: '2026-11-20T10:00:00.000Z', day: undefined },
    ]);
  });

  test('a day that ended less than an hour ago is counted with today, as one piece', () => {
    const early = midnight + SEALED_AFTER_MS - 1;
    const pieces = windowPieces(midnight - DAY_MS, early, early);
    assert.deepEqual(pieces, [{ from: midnight - DAY_MS, before: early }]);
    const sealed = windowPieces(midnight - DAY_MS, early + 1, early + 1);
    assert.deepEqual(
      sealed.map((piece) => piece.day),
      ['2026-11-19', undefined],
    );
  });

  test('a window ending at a sealed midnight ends with a whole day; an empty window has no pieces', () => {
    const pieces = windowPieces(midnight - DAY_MS - HOUR_MS, midnight, now);
    assert.deepEqual(
      pieces.map((piece) => [iso(piece.from), piece.day]),
      [
        ['2026-11-18T23:00:00.000Z', undefined],
        ['2026-11-19T00:00:00.000Z', '2026-11-19'],
      ],
    );
    assert.deepEqual(windowPieces(now, now, now), []);
    // Pieces tile the window: each starts where the last ended.
    const long = windowPieces(midnight - 31 * DAY_MS + 1, now, now);
    assert.equal(long[0].from, midnight - 31 * DAY_MS + 1);
    assert.equal(long.at(-1)!.before, now);
    for (let i = 1; i < long.length; i += 1) assert.equal(long[i].from, long[i - 1].before);
    assert.equal(long.filter((piece) => piece.day).length, 30);
  });
});

/**
 * A 31-day page counts sealed days once (lineage_days) and the rest when read. What a reader sees is what a
 * count of the rows would give: every step of the window once, in order, across pieces and from either end;
 * another account's steps never; a deleted project's steps no more, although its days had been kept.
 */
describeEachStore('lineage pages over kept day counts', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let doomed: string;
  let accountId: string;
  const now = Date.now();
  const today = Math.floor(now / DAY_MS) * DAY_MS;

  /** Steps recorded at `times` (ms) in the project, as recording writes them. */
  const seed = (account: string, project: string, times: number[]) => seedLineageSteps(server.db, account, project, times);

  /** The account's step ids in [from, before), in the order a page lists them, counted from the rows. */
  async function expected(from: number, before: number): Promise<string[]> {
    const rows = await server.db
      .selectFrom('lineageSteps')
      .select('id')
      .where('accountId', '=', accountId)
      .where('generatedAt', '>=', iso(from))
      .where('generatedAt', '<', iso(before))
      .orderBy('generatedAt')
      .orderBy('id')
      .execute();
    return rows.map((row) => String(row.id));
  }

  /** Every page of the window, `size` at a time; the ids in order, and each page's total. */
  async function readAll(from: number, before: number, size: number) {
    const ids: string[] = [];
    const totals = new Set<number>();
    for (let page = 0; ; page += 1) {
      const answer = await server.api(
        'GET',
        `/lineage/events?generatedFrom=${iso(from)}&generatedBefore=${iso(before)}&page=${page}&size=${size}`,
        { token: caller.token },
      );
      assert.equal(answer.status, 200, answer.text);
      totals.add(answer.body.total);
      if (answer.body.results.length === 0) break;
      ids.push(...answer.body.results.map((result: { id: string }) => result.id));
    }
    return { ids, totals: [...totals] };
  }

  const keptDays = () =>
    server.db
      .selectFrom('lineageDays')
      .select(['day', 'events'])
      .where('accountId', '=', accountId)
      .orderBy('day')
      .execute()
      .then((rows) => rows.map((row) => [row.day, Number(row.events)]));

  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, projectId } = await server.prologue());
    doomed = await server.newProject(caller);
    accountId = caller.accountId;
    // Every 5 hours over the last 6 days, and steps at midnight exactly and a millisecond before it.
    const times: number[] = [];
    for (let at = now - 6 * DAY_MS; at < now; at += 5 * HOUR_MS) times.push(at);
    for (let day = 1; day <= 5; day += 1) times.push(today - day * DAY_MS, today - day * DAY_MS - 1);
    await seed(accountId, projectId, times);
    await seed(accountId, doomed, [today - 2 * DAY_MS + HOUR_MS, today - 3 * DAY_MS + HOUR_MS, now - 1000]);
    // Another account's steps in the same days.
    const other = await server.newAccount();
    const elsewhere = await server.newProject(other);
    await seed(other.accountId, elsewhere, [today - 2 * DAY_MS + 2 * HOUR_MS, now - 2000]);
  });
  after(() => server.close());

  test('every step of the window once and in order, from either end, with one total; sealed days kept', async () => {
    // From the middle of a day, so that the window starts and ends with counted pieces.
    const from = today - 5 * DAY_MS - 7 * HOUR_MS;
    const before = now + 1;
    const want = await expected(from, before);
    assert.ok(want.length > 30);
    for (const size of [7, 100]) {
      const { ids, totals } = await readAll(from, before, size);
      assert.deepEqual(totals, [want.length]);
      assert.deepEqual(ids, want);
    }
    // The sealed whole days of the window are kept, each with the account's steps of that day.
    const sealedUntil = Math.floor((now - SEALED_AFTER_MS) / DAY_MS) * DAY_MS;
    const wantDays: [string, number][] = [];
    for (let day = today - 5 * DAY_MS; day + DAY_MS <= sealedUntil; day += DAY_MS)
      wantDays.push([iso(day).slice(0, 10), (await expected(day, day + DAY_MS)).length]);
    assert.ok(wantDays.length >= 4);
    assert.deepEqual(await keptDays(), wantDays);
  });

  test('a window read again answers from what was kept, alike', async () => {
    const from = today - 4 * DAY_MS;
    const before = today - DAY_MS;
    const want = await expected(from, before);
    const { ids, totals } = await readAll(from, before, 5);
    assert.deepEqual(totals, [want.length]);
    assert.deepEqual(ids, want);
  });

  test("a project's deletion forgets its account's kept days: the next read counts without its steps", async () => {
    const from = today - 5 * DAY_MS - 7 * HOUR_MS;
    const before = now + 1;
    await readAll(from, before, 100);
    assert.ok((await keptDays()).length > 0);
    const deleted = await server.api('DELETE', `/projects/${doomed}`, { token: caller.token });
    assert.equal(deleted.status, 204, deleted.text);
    assert.deepEqual(await keptDays(), []);
    const want = await expected(from, before);
    const { ids, totals } = await readAll(from, before, 9);
    assert.deepEqual(totals, [want.length]);
    assert.deepEqual(ids, want);
    assert.ok((await keptDays()).every(([, events]) => Number(events) > 0));
  });

  test("windows before the account's first step keep nothing: what is kept grows with the days recorded, not with reads (attack 6, F1)", async () => {
    const before = (await keptDays()).length;
    for (let month = 0; month < 6; month += 1) {
      const from = Date.parse('0001-01-01T00:00:00.000Z') + month * 31 * DAY_MS;
      const { ids, totals } = await readAll(from, from + 31 * DAY_MS, 100);
      assert.deepEqual([ids, totals], [[], [0]]);
    }
    assert.equal((await keptDays()).length, before);
  });

  test("a step recorded into a kept day (a writer's clock behind) makes that day counted again: no page skips an event (attack 6, F2)", async () => {
    const from = today - 5 * DAY_MS - 7 * HOUR_MS;
    const before = now + 1;
    await readAll(from, before, 100);
    const late = today - 3 * DAY_MS + 23 * HOUR_MS;
    const day = iso(late).slice(0, 10);
    assert.ok((await keptDays()).some(([kept]) => kept === day));
    await seed(accountId, projectId, [late]);
    assert.ok(!(await keptDays()).some(([kept]) => kept === day));
    const want = await expected(from, before);
    for (const size of [3, 4, 7]) {
      const { ids, totals } = await readAll(from, before, size);
      assert.deepEqual(totals, [want.length]);
      assert.deepEqual(ids, want);
    }
    // A step of today leaves the kept days be.
    const kept = await keptDays();
    await seed(accountId, projectId, [Date.now()]);
    assert.deepEqual(await keptDays(), kept);
  });
});
