import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { EventStream } from '../helpers/event-stream.ts';
import { orchestration, uploadVersion } from '../helpers/executions.ts';

const RUNS = 4_100;

/**
 * One transaction announcing more than 4,095 events (attack finding F9): on PostgreSQL an outbox id is a
 * transaction id × 4096 + the event's place, so a transaction's own block holds 4,095 events; deleting an
 * agent with 4,100 unfinished runs ends them all in the deleting transaction, each announced, with ids that
 * are safe integers, in order, read by the event stream.
 */
describeEachStore('many events in one transaction', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
  });
  after(() => server.close());

  test(`deleting an agent with ${RUNS} unfinished runs ends and announces every one`, async () => {
    const projectId = await server.newProject(caller);
    const environment = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod' },
    });
    assert.equal(environment.status, 201, environment.text);
    await uploadVersion(server, caller, projectId, 'prod', 'v1', {
      'pipelines/wait.orch.yaml': orchestration(`    Start:\n      type: "start"\n`),
    });
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: `many-${randomUUID()}`, agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' },
    });
    assert.equal(created.status, 201, created.text);
    const agentId = created.body.agentId as string;
    const started = await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { pipelineName: 'pipelines/wait', environmentName: 'prod', agentId },
    });
    assert.equal(started.status, 201, started.text);
    // The other runs are copies of the first, seeded straight into the store (no agent work of their own).
    const first = await server.db
      .selectFrom('executions')
      .selectAll()
      .where('id', '=', started.body.pipelineExecutionId)
      .executeTakeFirstOrThrow();
    const { rowVersion: _version, ...template } = first;
    const copies = Array.from({ length: RUNS - 1 }, () => ({
      ...template,
      id: randomUUID(),
      agentWorkId: null,
      executionTag: null,
      runningTag: null,
    }));
    for (let i = 0; i < copies.length; i += 200)
      await server.db
        .insertInto('executions')
        .values(copies.slice(i, i + 200))
        .execute();
    const runIds = new Set([first.id, ...copies.map((copy) => copy.id)]);

    const stream = await EventStream.open(server.url, caller.token, { query: '?type=pipeline-execution.finished' });
    const deleted = await server.api('DELETE', `/agents/${agentId}`, { token: caller.token });
    assert.equal(deleted.status, 202, deleted.text);

    const unfinished = await server.db
      .selectFrom('executions')
      .select((eb) => eb.fn.countAll<number>().as('count'))
      .where('agentId', '=', agentId)
      .where('status', '!=', 'CANCELLED')
      .executeTakeFirstOrThrow();
    assert.equal(Number(unfinished.count), 0);
    const announced = await stream.take(RUNS, 60_000);
    stream.close();
    assert.equal(announced.length, RUNS);
    assert.deepEqual(new Set(announced.map((event) => event.body.data.executionId)), runIds);
    const ids = announced.map((event) => event.id);
    assert.ok(
      ids.every((id, i) => Number.isSafeInteger(id) && (i === 0 || id > ids[i - 1])),
      'ids are safe integers, in order',
    );
  });
});
