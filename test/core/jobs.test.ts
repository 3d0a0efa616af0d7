import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadConfig } from '../../src/core/config.ts';
import { migrate, openStore, type Store } from '../../src/core/db/database.ts';
import { JobQueue } from '../../src/core/jobs.ts';
import { describeEachStore, scratchStore } from '../helpers/harness.ts';

describeEachStore('job queue', (kind) => {
  let stores: Store[];
  let drop: () => Promise<void>;
  before(async () => {
    const scratch = await scratchStore(kind);
    drop = scratch.drop;
    const config = { ...loadConfig({}), ...scratch.settings };
    // Two connections to one store stand for two server processes.
    stores = [openStore(config), openStore(config)];
    for (const store of stores) await migrate(store);
  });
  after(async () => {
    await Promise.all(stores.map((store) => store.close()));
    await drop();
  });

  test('each job is claimed exactly once across workers', async () => {
    const runs = new Map<number, number>();
    const queues = stores.map((store) => new JobQueue(store));
    for (const queue of queues) {
      queue.register('count', async (payload) => {
        const n = (payload as { n: number }).n;
        runs.set(n, (runs.get(n) ?? 0) + 1);
        await new Promise((r) => setTimeout(r, 1));
      });
    }
    for (let n = 0; n < 60; n += 1) await queues[0].enqueue(stores[0].db, 'count', { n });
    const done = await Promise.all([queues[0].drain(), queues[1].drain(), queues[0].drain(), queues[1].drain()]);
    assert.equal(
      done.reduce((a, b) => a + b, 0),
      60,
    );
    assert.equal(runs.size, 60);
    assert.ok([...runs.values()].every((count) => count === 1));
    const states = await stores[0].db.selectFrom('jobs').select('state').where('type', '=', 'count').execute();
    assert.ok(states.every((row) => row.state === 'done'));
  });

  test('a lane runs its jobs at once up to its concurrency; a group runs one job at a time, in order, across workers', async () => {
    const queues = stores.map((store) => new JobQueue(store));
    let running = 0;
    let most = 0;
    const runningOf = new Map<string, number>();
    const mostOf = new Map<string, number>();
    const order: string[] = [];
    for (const queue of queues) {
      queue.register(
        'laned',
        async (payload) => {
          const { group, n } = payload as { group: string; n: number };
          running += 1;
          runningOf.set(group, (runningOf.get(group) ?? 0) + 1);
          most = Math.max(most, running);
          mostOf.set(group, Math.max(mostOf.get(group) ?? 0, runningOf.get(group)!));
          order.push(`${group}:${n}`);
          await new Promise((r) => setTimeout(r, 60));
          running -= 1;
          runningOf.set(group, runningOf.get(group)! - 1);
        },
        { concurrency: 4 },
      );
    }
    const start = Date.now() - 60_000;
    for (let n = 0; n < 4; n += 1) {
      for (const group of ['a', 'b', 'c']) {
        await queues[0].enqueue(stores[0].db, 'laned', { group, n }, { group, runAt: new Date(start + n * 1000) });
      }
    }
    const done = await Promise.all([queues[0].drain(), queues[1].drain()]);
    assert.equal(done[0] + done[1], 12);
    assert.ok(most > 1, `jobs of different groups ran at once (at most ${most})`);
    for (const group of ['a', 'b', 'c']) {
      assert.equal(mostOf.get(group), 1, `group ${group} ran one at a time`);
      const ofGroup = order.filter((entry) => entry.startsWith(`${group}:`));
      assert.deepEqual(
        ofGroup,
        [0, 1, 2, 3].map((n) => `${group}:${n}`),
      );
    }
  });

  test('a failing job is retried with backoff and then marked failed', async () => {
    const queue = new JobQueue(stores[0]);
    let calls = 0;
    queue.register('flaky', async () => {
      calls += 1;
      throw new Error(`attempt ${calls} failed`);
    });
    const id = await queue.enqueue(stores[0].db, 'flaky', {}, { maxAttempts: 2 });
    assert.equal(await queue.drain(), 1);
    let job = await stores[0].db.selectFrom('jobs').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(job.state, 'queued');
    assert.ok(job.runAt > new Date().toISOString(), 'the retry waits');
    assert.equal(await queue.drain(), 0, 'not due yet');
    await stores[0].db
      .updateTable('jobs')
      .set({ runAt: new Date(0).toISOString() })
      .where('id', '=', id)
      .execute();
    assert.equal(await queue.drain(), 1);
    job = await stores[0].db.selectFrom('jobs').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(job.state, 'failed');
    assert.equal(job.attempts, 2);
    assert.equal(job.lastError, 'attempt 2 failed');
  });

  test('a job whose worker vanished is taken over when its lease runs out', async () => {
    const vanishing = new JobQueue(stores[0], { leaseMs: 50 });
    const survivor = new JobQueue(stores[1]);
    vanishing.register('lease', async () => {});
    let ran = 0;
    survivor.register('lease', async () => {
      ran += 1;
    });
    await vanishing.enqueue(stores[0].db, 'lease', {});
    assert.ok(await vanishing.claim(), 'claimed, then never run');
    assert.equal(await survivor.drain(), 0, 'still leased');
    await new Promise((r) => setTimeout(r, 80));
    assert.equal(await survivor.drain(), 1);
    assert.equal(ran, 1);
  });

  test('a job running longer than its lease keeps it while its worker lives: nobody else takes it over', async () => {
    const worker = new JobQueue(stores[0], { leaseMs: 150 });
    const other = new JobQueue(stores[1], { leaseMs: 150 });
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    worker.register('long', () => finished);
    let takenOver = 0;
    other.register('long', async () => {
      takenOver += 1;
    });
    await worker.enqueue(stores[0].db, 'long', {});
    const running = worker.drain();
    await new Promise((r) => setTimeout(r, 600)); // four leases
    assert.equal(await other.drain(), 0, 'taken over although its worker lives');
    finish();
    assert.equal(await running, 1);
    assert.equal(takenOver, 0);
  });

  test('a job enqueued in a transaction that rolls back never exists', async () => {
    const queue = new JobQueue(stores[0]);
    queue.register('ghost', async () => assert.fail('must not run'));
    await assert.rejects(
      stores[0].db.transaction().execute(async (trx) => {
        await queue.enqueue(trx, 'ghost', {});
        throw new Error('rollback');
      }),
    );
    assert.equal(await queue.drain(), 0);
  });

  test('a started worker runs jobs as they come and stops cleanly', async () => {
    const queue = new JobQueue(stores[0], { pollIntervalMs: 20 });
    const seen: string[] = [];
    queue.register('live', async (payload) => {
      seen.push((payload as { v: string }).v);
    });
    queue.start();
    await queue.enqueue(stores[0].db, 'live', { v: 'a' });
    for (let i = 0; i < 100 && seen.length === 0; i += 1) await new Promise((r) => setTimeout(r, 20));
    await queue.stop();
    assert.deepEqual(seen, ['a']);
  });
});
