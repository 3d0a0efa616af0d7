import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeOnPostgres, TestServer, type Caller } from '../helpers/harness.ts';
import { DAY_MS } from '../../src/areas/lineage/days.ts';
import { EMPTY_HASH, lineageStepRow, seedLineageSteps } from '../helpers/lineage-rows.ts';

const HOUR_MS = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Kept day counts against what changes a day's steps, on PostgreSQL with several processes: another process
 * (a second connection, doing what a project's deletion or a late step's write does) interleaved with a
 * window's first read at the points where a count could be kept stale. Whatever the order, the next read's
 * total and pages are the rows (from attack 6's race tests).
 */
describeOnPostgres('lineage kept days racing deletions and late steps', () => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let doomed: string;
  let accountId: string;
  const today = Math.floor(Date.now() / DAY_MS) * DAY_MS;
  const from = today - 5 * DAY_MS;
  const until = today - 2 * DAY_MS;
  let n = 0;

  const row = (project: string, at: number) => lineageStepRow(accountId, project, at, (n += 1));
  async function seed(project: string, times: number[]) {
    await seedLineageSteps(server.db, accountId, project, times, n + 1);
    n += times.length;
  }

  const read = () =>
    server.api('GET', `/lineage/events?generatedFrom=${iso(from)}&generatedBefore=${iso(until)}&size=100`, {
      token: caller.token,
    });
  const kept = async () =>
    (
      await server.db
        .selectFrom('lineageDays')
        .select(['day', 'events'])
        .where('accountId', '=', accountId)
        .orderBy('day')
        .execute()
    ).map((day) => `${day.day}:${day.events}`);
  const rows = async () =>
    (
      await server.db
        .selectFrom('lineageSteps')
        .select('id')
        .where('accountId', '=', accountId)
        .where('generatedAt', '>=', iso(from))
        .where('generatedAt', '<', iso(until))
        .execute()
    ).length;

  /** The other process. */
  async function other(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: server.config.databaseUrl });
    await client.connect();
    return client;
  }

  before(async () => {
    server = await TestServer.start('postgres');
    ({ caller, projectId } = await server.prologue());
    doomed = await server.newProject(caller);
    accountId = caller.accountId;
    await seed(projectId, [from + HOUR_MS, from + DAY_MS + HOUR_MS, from + 2 * DAY_MS + HOUR_MS]);
  });
  after(() => server.close());

  test("a deletion that has deleted steps but not taken the lock: the read keeps counts with them, the deletion's end forgets them", async () => {
    await seed(doomed, [from + 2 * HOUR_MS, from + DAY_MS + 2 * HOUR_MS]);
    const deletion = await other();
    await deletion.query('begin');
    await deletion.query('delete from lineage_steps where project_id = $1', [doomed]);
    assert.equal((await read()).body.total, 5); // the deletion has not committed
    assert.equal((await kept()).length, 3);
    await deletion.query('select pg_advisory_xact_lock(34, hashtext($1))', [accountId]);
    await deletion.query('delete from lineage_days where account_id = $1', [accountId]);
    await deletion.query('commit');
    await deletion.end();
    assert.deepEqual(await kept(), []);
    const answer = await read();
    assert.equal(answer.body.total, 3);
    assert.equal(answer.body.results.length, 3);
  });

  test('a deletion holding the lock: a first read waits for its commit and counts without its steps', async () => {
    await server.db.deleteFrom('lineageDays').where('accountId', '=', accountId).execute();
    await seed(doomed, [from + 3 * HOUR_MS, from + DAY_MS + 3 * HOUR_MS]);
    const deletion = await other();
    await deletion.query('begin');
    await deletion.query('delete from lineage_steps where project_id = $1', [doomed]);
    await deletion.query('select pg_advisory_xact_lock(34, hashtext($1))', [accountId]);
    await deletion.query('delete from lineage_days where account_id = $1', [accountId]);
    const reading = read();
    await new Promise((resolve) => setTimeout(resolve, 500));
    await deletion.query('commit');
    await deletion.end();
    const answer = await reading;
    assert.equal(answer.body.total, 3);
    assert.equal(answer.body.results.length, 3);
    assert.deepEqual(await kept(), [
      `${iso(from).slice(0, 10)}:1`,
      `${iso(from + DAY_MS).slice(0, 10)}:1`,
      `${iso(from + 2 * DAY_MS).slice(0, 10)}:1`,
    ]);
  });

  /** Another process's transaction that has written a step into a past day, not yet committed. */
  async function lateStep(at: number): Promise<pg.Client> {
    const writer = await other();
    await writer.query('begin');
    const late = row(projectId, at);
    await writer.query(
      `insert into lineage_steps (account_id, project_id, execution_id, generated_at, event_time, job_name, job_kind, step_index,
         step_name, step_status, body_hash) values ($1, $2, $3, $4, $4, $5, 'STEP', $6, $7, 'SUCCESS', $8)`,
      [
        late.accountId,
        late.projectId,
        late.executionId,
        late.generatedAt,
        late.jobName,
        late.stepIndex,
        late.stepName,
        EMPTY_HASH,
      ],
    );
    return writer;
  }

  test("a late step's write not yet committed holds the days lock (migration 0049): a first read waits for it and counts it", async () => {
    await server.db.deleteFrom('lineageDays').where('accountId', '=', accountId).execute();
    const writer = await lateStep(from + DAY_MS + 5 * HOUR_MS);
    const reading = read();
    await new Promise((resolve) => setTimeout(resolve, 500));
    await writer.query('commit');
    await writer.end();
    const answer = await reading;
    assert.equal(answer.body.total, 4);
    assert.equal(answer.body.total, await rows());
    assert.ok((await kept()).includes(`${iso(from + DAY_MS).slice(0, 10)}:2`), String(await kept()));
  });

  test('a late step into a kept day: a read before its commit answers what was committed, the first after it counts the day again', async () => {
    await read();
    assert.equal((await kept()).length, 3);
    const writer = await lateStep(from + 2 * DAY_MS + 5 * HOUR_MS);
    assert.equal((await read()).body.total, 4);
    await writer.query('commit');
    await writer.end();
    assert.ok(!(await kept()).some((day) => day.startsWith(iso(from + 2 * DAY_MS).slice(0, 10))));
    const answer = await read();
    assert.equal(answer.body.total, 5);
    assert.equal(answer.body.results.length, 5);
    assert.ok((await kept()).includes(`${iso(from + 2 * DAY_MS).slice(0, 10)}:2`), String(await kept()));
  });
});
