import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { EventStream } from '../helpers/event-stream.ts';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { insertAgent, uploadVersion, WAITING } from '../helpers/executions.ts';
import { sweepAgentPresence, touchAgent } from '../../src/areas/agents/service.ts';
import { pruneEvents } from '../../src/core/outbox.ts';
import pg from 'pg';

const dpc = path.resolve(import.meta.dirname, '../../bin/dpc.js');

describeEachStore('event feed (Server-Sent Events)', (kind) => {
  let first: TestServer;
  let second: TestServer;
  let caller: Caller;
  before(async () => {
    first = await TestServer.start(kind, { eventsPollMs: 200 });
    second = await TestServer.startBeside(first);
    caller = await first.newAccount();
  });
  after(async () => {
    await second.close();
    await first.close();
  });

  test('a write is announced to a subscriber with its id, type, project and subject', async () => {
    const stream = await EventStream.open(first.url, caller.token);
    try {
      assert.equal(stream.status, 200);
      const projectId = await first.newProject(caller);
      const created = await first.api('POST', `/projects/${projectId}/environments`, {
        token: caller.token,
        body: { name: 'dev' },
      });
      assert.equal(created.status, 201);
      const [project, environment] = await stream.take(2);
      assert.equal(project.type, 'projects.created');
      assert.equal(environment.type, 'environments.created');
      assert.ok(environment.id > project.id);
      assert.equal(environment.body.projectId, projectId);
      assert.equal(environment.body.subject, `projects/${projectId}/environments`);
      assert.deepEqual(environment.body.data.resourceIds, { projectId, environmentName: 'dev' });
    } finally {
      stream.close();
    }
  });

  test('a client resuming on another instance with Last-Event-ID gets every later event once, in order', async () => {
    const projectId = await first.newProject(caller);
    const stream = await EventStream.open(first.url, caller.token, { query: `?projectId=${projectId}` });
    for (let i = 0; i < 3; i += 1) {
      await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: `a-${i}` } });
    }
    const seen = await stream.take(3);
    stream.close();
    // Written while the client is away, through both instances, some at once.
    await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        (i % 2 ? first : second).api('POST', `/projects/${projectId}/environments`, {
          token: caller.token,
          body: { name: `b-${i}` },
        }),
      ),
    );
    const resumed = await EventStream.open(second.url, caller.token, {
      query: `?projectId=${projectId}`,
      lastEventId: seen.at(-1)!.id,
    });
    try {
      await second.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'c' } });
      const later = await resumed.take(7);
      const names = later.map((event) => event.body.data.resourceIds.environmentName);
      assert.deepEqual(names.slice(0, 6).sort(), ['b-0', 'b-1', 'b-2', 'b-3', 'b-4', 'b-5']);
      assert.equal(names[6], 'c');
      const ids = [...seen, ...later].map((event) => event.id);
      assert.deepEqual(
        ids,
        [...ids].sort((a, b) => a - b),
      );
      assert.equal(new Set(ids).size, ids.length);
      // Nothing more arrives: nothing is repeated.
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.equal(resumed.received.length, 7);
    } finally {
      resumed.close();
    }
  });

  test('concurrent writes from both instances: every event once, ids growing in the order sent', async () => {
    const projectId = await first.newProject(caller);
    const stream = await EventStream.open(second.url, caller.token);
    try {
      await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          (i % 2 ? first : second).api('POST', `/projects/${projectId}/environments`, {
            token: caller.token,
            body: { name: `n-${i}` },
          }),
        ),
      );
      const events = await stream.take(20);
      const ids = events.map((event) => event.id);
      assert.deepEqual(
        ids,
        [...ids].sort((a, b) => a - b),
      );
      assert.equal(new Set(ids).size, 20);
      assert.deepEqual(
        events.map((event) => event.body.data.resourceIds.environmentName).sort(),
        Array.from({ length: 20 }, (_, i) => `n-${i}`).sort(),
      );
      // Resuming after the first, on the other instance: the other 19, once each, in the same order.
      const resumed = await EventStream.open(first.url, caller.token, { lastEventId: ids[0] });
      try {
        assert.deepEqual(
          (await resumed.take(19)).map((event) => event.id),
          ids.slice(1),
        );
      } finally {
        resumed.close();
      }
    } finally {
      stream.close();
    }
  });

  test('filters by type (exact or prefix) and project; other accounts are never seen', async () => {
    const other = await first.newAccount('other');
    const projectA = await first.newProject(caller);
    const projectB = await first.newProject(caller);
    const onlyB = await EventStream.open(first.url, caller.token, { query: `?projectId=${projectB}&type=environments.*` });
    const deletes = await EventStream.open(first.url, caller.token, { query: '?type=environments.deleted,variables.created' });
    const others = await EventStream.open(first.url, other.token);
    try {
      await first.api('POST', `/projects/${projectA}/environments`, { token: caller.token, body: { name: 'x' } });
      await first.api('POST', `/projects/${projectB}/environments`, { token: caller.token, body: { name: 'y' } });
      await first.api('DELETE', `/projects/${projectB}/environments/y`, { token: caller.token });
      const b = await onlyB.take(2);
      assert.deepEqual(
        b.map((event) => event.type),
        ['environments.created', 'environments.deleted'],
      );
      const [deleted] = await deletes.take(1);
      assert.equal(deleted.type, 'environments.deleted');
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.equal(onlyB.received.length, 2);
      assert.equal(deletes.received.length, 1);
      assert.equal(others.received.length, 0);
    } finally {
      onlyB.close();
      deletes.close();
      others.close();
    }
  });

  test('a Last-Event-ID the account has not reached is refused; the stream needs a token', async () => {
    // Far past any id: on PostgreSQL ids grow with the cluster's transaction ids (xid × 4096), not per account.
    const refused = await EventStream.open(first.url, caller.token, { lastEventId: 999_999_999_999_999 });
    assert.equal(refused.status, 400);
    assert.ok(refused.problem.violations.some((v: string) => v.startsWith('Last-Event-ID')));
    const anonymous = await fetch(`${first.url}/dpc/v1/events/stream`);
    assert.equal(anonymous.status, 401);
    await anonymous.body?.cancel();
    expectProblem(await first.api('GET', '/events/stream?lastEventId=abc', { token: caller.token }), 400);
  });

  test('a stream that starts now sends nothing that committed before it, while an older transaction holds the horizon back', async () => {
    // PostgreSQL: a transaction left open elsewhere keeps every later id past the safe point; SQLite: no such thing.
    const holder = kind === 'postgres' ? new pg.Client({ connectionString: first.config.databaseUrl }) : undefined;
    await holder?.connect();
    try {
      await holder?.query('begin');
      await holder?.query('select txid_current()');
      const projectId = await first.newProject(caller);
      await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'earlier' } });
      const stream = await EventStream.open(first.url, caller.token, { query: `?projectId=${projectId}` });
      try {
        await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'later' } });
        await holder?.query('commit');
        const [next] = await stream.take(1);
        assert.equal(next.body.data.resourceIds.environmentName, 'later');
      } finally {
        stream.close();
      }
    } finally {
      await holder?.end();
    }
  });

  test('a stream ends when its server closes, and the client resumes on the other one', async () => {
    const third = await TestServer.startBeside(first);
    const projectId = await first.newProject(caller);
    const stream = await EventStream.open(third.url, caller.token, { query: `?projectId=${projectId}` });
    await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'before' } });
    const [seen] = await stream.take(1);
    await third.close();
    for (let i = 0; i < 50 && !stream.isEnded; i += 1) await new Promise((resolve) => setTimeout(resolve, 100));
    assert.ok(stream.isEnded);
    await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'after' } });
    const resumed = await EventStream.open(second.url, caller.token, { query: `?projectId=${projectId}`, lastEventId: seen.id });
    try {
      const [next] = await resumed.take(1);
      assert.equal(next.body.data.resourceIds.environmentName, 'after');
    } finally {
      resumed.close();
    }
  });

  test('dpc events tail prints the events after --after, one JSON line each', async () => {
    const projectId = await first.newProject(caller);
    const stream = await EventStream.open(first.url, caller.token, { query: `?projectId=${projectId}` });
    await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 't0' } });
    const [mark] = await stream.take(1);
    stream.close();
    await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 't1' } });
    await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 't2' } });
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [dpc, 'events', 'tail', '--project', projectId, '--after', String(mark.id), '--count', '2'],
      {
        env: { ...process.env, DPC_URL: second.url, DPC_CLIENT_ID: caller.clientId, DPC_CLIENT_SECRET: caller.clientSecret },
        timeout: 60_000,
      },
    );
    const lines = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    assert.deepEqual(
      lines.map((event) => event.data.resourceIds.environmentName),
      ['t1', 't2'],
    );
    const [t1, t2] = lines.map((event) => event.id as number);
    assert.ok(mark.id < t1 && t1 < t2);
  });

  test('state changes are announced: artifact published, run started and finished, agent connected and disconnected', async () => {
    const projectId = await first.newProject(caller);
    await first.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'prod' } });
    // The pipeline waits ${delay} seconds: a project variable (a run of an unknown one is refused).
    const delay = { name: 'delay', type: 'NUMBER', behaviour: 'COPIED', value: 60 };
    await first.api('POST', `/projects/${projectId}/variables`, { token: caller.token, body: delay });
    const agentId = await insertAgent(first, caller.accountId);
    const stream = await EventStream.open(first.url, caller.token, {
      query: '?type=artifact.*,pipeline-execution.*,agent.*',
    });
    try {
      await uploadVersion(first, caller, projectId, 'prod', 'v1', { 'wait.orch.yaml': WAITING });
      const started = await first.api('POST', `/projects/${projectId}/pipeline-executions`, {
        token: caller.token,
        body: { pipelineName: 'wait.orch.yaml', environmentName: 'prod', agentId },
      });
      assert.equal(started.status, 201, started.text);
      const runId = started.body.pipelineExecutionId;
      const cancelled = await first.api('PATCH', `/projects/${projectId}/pipeline-executions/${runId}`, {
        token: caller.token,
        body: { status: 'CANCELLED', forceUpdate: true },
      });
      assert.equal(cancelled.status, 200, cancelled.text);
      await touchAgent(first.db, agentId);
      await touchAgent(first.db, agentId); // still connected: announced once
      await first.db.updateTable('agents').set({ lastContactAt: '2000-01-01T00:00:00.000Z' }).where('id', '=', agentId).execute();
      // Swept here, or by a server's own sweep meanwhile: either way announced once.
      await sweepAgentPresence(first.db, 30);
      await sweepAgentPresence(first.db, 30);
      const events = await stream.take(5);
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(stream.received.length, 5);
      assert.deepEqual(
        events.map((event) => event.type),
        [
          'artifact.published',
          'pipeline-execution.started',
          'pipeline-execution.finished',
          'agent.connected',
          'agent.disconnected',
        ],
      );
      assert.equal(events[0].body.data.versionName, 'v1');
      assert.equal(events[1].body.data.executionId, runId);
      assert.equal(events[1].body.projectId, projectId);
      assert.equal(events[2].body.data.status, 'CANCELLED');
      assert.equal(events[2].body.subject, `pipeline-executions/${runId}`);
      assert.equal(events[3].body.data.agentId, agentId);
    } finally {
      stream.close();
    }
  });

  test('after retention removed events, a client resuming from an old id gets what is kept, and ids are not reused', async () => {
    const other = await first.newAccount('retention');
    const projectId = await first.newProject(other);
    const stream = await EventStream.open(first.url, other.token);
    await first.api('POST', `/projects/${projectId}/environments`, { token: other.token, body: { name: 'old' } });
    const [old] = await stream.take(1);
    stream.close();
    // Everything up to now is past retention.
    await pruneEvents(first.db, new Date(Date.now() + 1000).toISOString());
    await new Promise((resolve) => setTimeout(resolve, 1100));
    await first.api('POST', `/projects/${projectId}/environments`, { token: other.token, body: { name: 'new' } });
    const resumed = await EventStream.open(second.url, other.token, { lastEventId: 1 });
    let next;
    try {
      [next] = await resumed.take(1);
      assert.equal(next.body.data.resourceIds.environmentName, 'new');
      assert.ok(next.id > old.id);
    } finally {
      resumed.close();
    }
    // Retention keeps what is younger: a cut between two events removes the older one only.
    await new Promise((resolve) => setTimeout(resolve, 600));
    await first.api('POST', `/projects/${projectId}/environments`, { token: other.token, body: { name: 'newer' } });
    await pruneEvents(first.db, new Date(Date.parse(next.body.occurredAt) + 300).toISOString());
    const kept = await EventStream.open(first.url, other.token, { lastEventId: 1 });
    try {
      const [oldest] = await kept.take(1);
      assert.equal(oldest.body.data.resourceIds.environmentName, 'newer');
    } finally {
      kept.close();
    }
  });
});
