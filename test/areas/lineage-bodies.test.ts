import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { recordStepLineage } from '../../src/areas/lineage/index.ts';

/**
 * How a step's lineage is stored when the same step reports again (bench/lineage.ts): the body is the text
 * JSON.stringify writes of the lineage as sent, whatever was remembered of that step before, and a body is
 * left out of a step's write only once it is committed.
 */
describeEachStore('lineage bodies', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, projectId } = await server.prologue());
  });
  after(() => server.close());

  const orders = { namespace: 'postgres://db.internal:5432', name: 'shop.public.orders' };
  const mart = { namespace: 'postgres://db.internal:5432', name: 'shop.marts.daily' };

  const record = (executionId: string, index: number, lineage: unknown) =>
    server.db.transaction().execute((trx) =>
      recordStepLineage(
        trx,
        {
          accountId: caller.accountId,
          projectId,
          executionId,
          pipelineName: 'pipelines/bodies.orch.yaml',
          step: { index, name: `Step ${index}`, status: 'SUCCESS' },
        },
        lineage,
      ),
    );

  /** The stored body of each of a run's steps, in order. */
  const bodiesOf = async (executionId: string) =>
    (
      await server.db
        .selectFrom('lineageSteps as s')
        .innerJoin('lineageBodies as b', (join) =>
          join.onRef('b.projectId', '=', 's.projectId').onRef('b.hash', '=', 's.bodyHash'),
        )
        .select('b.body')
        .where('s.executionId', '=', executionId)
        .orderBy('s.id')
        .execute()
    ).map((row) => row.body);

  test('a step reporting again is stored as JSON.stringify writes what it sent: keys in its order, a changed value, -0, a field set to undefined', async () => {
    const lineage = () => ({
      inputs: [{ ...orders, fields: [{ name: 'id', type: 'integer' }] }],
      outputs: [{ ...mart, columnLineage: { id: [{ ...orders, field: 'id' }] } }],
      sql: 'insert into marts.daily select id from orders',
    });
    const reordered = { sql: lineage().sql, outputs: lineage().outputs, inputs: lineage().inputs };
    const changed = lineage();
    changed.inputs[0].fields[0].type = 'bigint';
    const extra = { ...lineage(), rows: -0, note: undefined };
    const sent = [lineage(), lineage(), reordered, lineage(), changed, extra, extra, lineage()];
    const executionId = randomUUID();
    for (const value of sent) await record(executionId, 0, value);
    assert.deepEqual(
      await bodiesOf(executionId),
      sent.map((value) => JSON.stringify(value)),
    );
    // What differs from the body remembered is checked as ever.
    const wrong = lineage();
    wrong.inputs[0].namespace = '';
    await assert.rejects(record(executionId, 0, wrong), (error: { status?: number; options?: { violations?: string[] } }) => {
      assert.equal(error.status, 400);
      assert.deepEqual(error.options?.violations, [
        'body.body.step.lineage.inputs[0].namespace: must be a string of 1 to 1024 characters',
      ]);
      return true;
    });
    assert.equal((await bodiesOf(executionId)).length, sent.length);
  });

  test('a body known as stored but gone since without the process seeing it (a failover to a standby that lacked it) is written again within 5 s', async () => {
    const lineage = { inputs: [{ ...orders, name: 'shop.public.failover' }], outputs: [mart] };
    const executionId = randomUUID();
    await record(executionId, 0, lineage); // inserted
    await record(executionId, 1, lineage); // met, committed before: known from now on
    await server.db
      .deleteFrom('lineageBodies')
      .where('projectId', '=', projectId)
      .where('body', '=', JSON.stringify(lineage))
      .execute();
    // A body is taken as stored for 5 s after it was last seen so (repository.ts, KNOWN_FOR_MS).
    await new Promise((resolve) => setTimeout(resolve, 5100));
    await record(executionId, 2, lineage);
    await record(executionId, 3, lineage);
    const stored = await bodiesOf(executionId);
    assert.equal(stored.length, 4, 'every step has its body again');
    assert.ok(stored.every((body) => body === JSON.stringify(lineage)));
  });

  test('a body whose transaction rolled back is written again by the next step that reports it, not taken as stored', async () => {
    const lineage = { inputs: [{ ...orders, name: `shop.public.rolled_${kind}` }], outputs: [mart] };
    const executionId = randomUUID();
    await assert.rejects(
      server.db.transaction().execute(async (trx) => {
        for (const index of [0, 1])
          await recordStepLineage(
            trx,
            {
              accountId: caller.accountId,
              projectId,
              executionId,
              pipelineName: 'pipelines/bodies.orch.yaml',
              step: { index, name: `Step ${index}`, status: 'SUCCESS' },
            },
            lineage,
          );
        throw new Error('rolled back');
      }),
      /rolled back/,
    );
    assert.deepEqual(await bodiesOf(executionId), []);
    // Reported again (and again, once it is stored), each step has its body.
    for (const index of [2, 3, 4]) await record(executionId, index, lineage);
    assert.deepEqual(
      await bodiesOf(executionId),
      [1, 2, 3].map(() => JSON.stringify(lineage)),
    );
    const page = await server.api(
      'GET',
      `/lineage/events?generatedFrom=${new Date(Date.now() - 60_000).toISOString()}&size=100`,
      {
        token: caller.token,
      },
    );
    const events = page.body.results.filter((result: { event: any }) => result.event.run.runId === executionId);
    assert.deepEqual(
      events.map((result: { event: any }) => result.event.inputs[0].name),
      [1, 2, 3].map(() => lineage.inputs[0].name),
    );
  });
});
