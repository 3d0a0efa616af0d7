import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { spawnAgent } from '../helpers/processes.ts';
import { CHECKING, eventually, orchestration, uploadVersion, WAITING } from '../helpers/executions.ts';

/**
 * Executions run by the real reference agent (`dpc agent run`, a child process) against a real server on
 * loopback, over the agent protocol. The agent heartbeats every second here (a 3 s connected window), so
 * it learns of a cancel within about a second.
 */
/** Start → eight branches at once → `and` → end success. */
const BRANCH_NAMES = Array.from({ length: 8 }, (_, i) => `Branch ${i + 1}`);
const BRANCHES = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: [${BRANCH_NAMES.map((name) => `"${name}"`).join(', ')}]
${BRANCH_NAMES.map(
  (name) => `    ${name}:
      type: "print-variables"
      transitions:
        success: ["All"]
`,
).join('')}    All:
      type: "and"
      transitions:
        success: ["End Success"]
    End Success:
      type: "end-success"
`);

describeEachStore('executions run by the reference agent', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let agentId: string;
  let credentials: { clientId: string; clientSecret: string };
  let stateDir: string;
  let agent: Awaited<ReturnType<typeof spawnAgent>> | undefined;

  const startAgent = async () => {
    agent = await spawnAgent({ url: server.url, ...credentials, stateDir });
  };
  /** Ends the agent process at once, as a crash would: it reports nothing more. */
  const killAgent = async () => {
    agent!.child.kill('SIGKILL');
    await agent!.exited;
    agent = undefined;
  };

  before(async () => {
    server = await TestServer.start(kind, {
      agentConnectedWindowSeconds: 3,
      agentWorkLeaseSeconds: 2,
      executionLostAfterMs: 2000,
      schedulerIntervalMs: 200,
    });
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const created = await server.api('POST', '/agents', {
      token: caller.token,
      body: { name: 'runner', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' },
    });
    assert.equal(created.status, 201, created.text);
    agentId = created.body.agentId;
    credentials = (await server.api('POST', `/agents/${agentId}/credentials`, { token: caller.token })).body;
    await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: 'prod', defaultAgentId: agentId },
    });
    for (const [name, type, value] of [
      ['region', 'TEXT', 'eu'],
      ['delay', 'NUMBER', 60],
    ] as const) {
      await server.api('POST', `/projects/${projectId}/variables`, {
        token: caller.token,
        body: { name, type, behaviour: 'SHARED', value },
      });
    }
    await uploadVersion(server, caller, projectId, 'prod', 'v1', {
      'check.orch.yaml': CHECKING,
      'wait.orch.yaml': WAITING,
      'branches.orch.yaml': BRANCHES,
    });
    stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    await startAgent();
  });
  after(async () => {
    if (agent) await killAgent();
    await server.close();
    rmSync(stateDir, { recursive: true, force: true });
  });

  const start = (body: Record<string, unknown>) =>
    server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'prod', ...body },
    });
  const status = async (id: string) =>
    (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/status`, { token: caller.token })).body.status;
  const steps = async (id: string) =>
    (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps?size=100`, { token: caller.token })).body
      .results as {
      name: string;
      result: { status: string; message: string | null };
    }[];
  const waiting = (id: string) =>
    eventually(
      () => steps(id),
      (list) => list.some((step) => step.name === 'Wait' && step.result.status === 'RUNNING'),
    );

  test('a pipeline that succeeds and one that fails at a step', async () => {
    const good = (await start({ pipelineName: 'check' })).body.pipelineExecutionId;
    const bad = (await start({ pipelineName: 'check', scalarVariables: { region: 'us' } })).body.pipelineExecutionId;
    assert.equal(
      await eventually(
        () => status(good),
        (value) => value === 'SUCCESS',
      ),
      'SUCCESS',
    );
    assert.equal(
      await eventually(
        () => status(bad),
        (value) => value === 'FAILED',
      ),
      'FAILED',
    );
    assert.deepEqual(
      (await steps(good)).map((step) => `${step.name}:${step.result.status}`),
      ['Start:SUCCESS', 'Print:SUCCESS', 'Check region:SUCCESS', 'End Success:SUCCESS'],
    );
    const failed = (await steps(bad)).find((step) => step.name === 'Check region')!;
    assert.match(failed.result.message!, /region is us, expected == eu/);
    assert.match(agent!.logs(), /region=eu/);
  });

  test('parallel branches through the agent: every step of every branch is recorded with its outcome', async () => {
    const id = (await start({ pipelineName: 'branches' })).body.pipelineExecutionId;
    assert.equal(
      await eventually(
        () => status(id),
        (value) => value !== 'RUNNING',
      ),
      'SUCCESS',
    );
    const recorded = await steps(id);
    assert.deepEqual(recorded.map((step) => step.name).sort(), [...BRANCH_NAMES, 'All', 'End Success', 'Start'].sort());
    assert.deepEqual(
      recorded.filter((step) => step.result.status !== 'SUCCESS'),
      [],
    );
  });

  test('cancelled while waiting: the agent interrupts the wait and the run ends CANCELLED', async () => {
    const id = (await start({ pipelineName: 'wait' })).body.pipelineExecutionId;
    await waiting(id);
    const cancel = await server.api('PATCH', `/projects/${projectId}/pipeline-executions/${id}`, {
      token: caller.token,
      body: { forceUpdate: false, status: 'CANCELLED' },
    });
    assert.equal(cancel.body.status, 'CANCELLING');
    assert.equal(
      await eventually(
        () => status(id),
        (value) => value === 'CANCELLED',
      ),
      'CANCELLED',
    );
    assert.equal((await steps(id)).find((step) => step.name === 'Wait')!.result.status, 'CANCELLED');
  });

  test('the agent dies mid-run: UNKNOWN past the window; restarted, it reports the run failed rather than running it twice', async () => {
    const id = (await start({ pipelineName: 'wait' })).body.pipelineExecutionId;
    await waiting(id);
    await killAgent();
    assert.equal(
      await eventually(
        () => status(id),
        (value) => value === 'UNKNOWN',
      ),
      'UNKNOWN',
    );
    await startAgent();
    assert.equal(
      await eventually(
        () => status(id),
        (value) => value === 'FAILED',
        20_000,
      ),
      'FAILED',
    );
    const details = await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}`, { token: caller.token });
    assert.match(details.body.message, /not run a second time/);
  });

  test('force-cancelled with the agent stopped: CANCELLED at once, and the agent coming back does not revive it', async () => {
    const id = (await start({ pipelineName: 'wait' })).body.pipelineExecutionId;
    await waiting(id);
    await killAgent();
    const cancel = await server.api('PATCH', `/projects/${projectId}/pipeline-executions/${id}`, {
      token: caller.token,
      body: { forceUpdate: true, status: 'CANCELLED' },
    });
    assert.deepEqual(cancel.body, { pipelineExecutionId: id, status: 'CANCELLED' });
    await startAgent();
    // The agent works again (a new run succeeds), and the cancelled one stays cancelled.
    const next = (await start({ pipelineName: 'check' })).body.pipelineExecutionId;
    assert.equal(
      await eventually(
        () => status(next),
        (value) => value === 'SUCCESS',
      ),
      'SUCCESS',
    );
    await new Promise((resolve) => setTimeout(resolve, 2500));
    assert.equal(await status(id), 'CANCELLED');
  });

  test('two server instances and two agent processes polling them: each run is handed to one poll and runs once', async () => {
    const beside = await TestServer.startBeside(server);
    const otherState = mkdtempSync(path.join(tmpdir(), 'dpc-agent-'));
    const second = await spawnAgent({ url: beside.url, ...credentials, stateDir: otherState });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 6; i += 1) ids.push((await start({ pipelineName: 'check' })).body.pipelineExecutionId);
      for (const id of ids)
        assert.equal(
          await eventually(
            () => status(id),
            (value) => value === 'SUCCESS',
          ),
          'SUCCESS',
        );
      const works = await server.db
        .selectFrom('executions')
        .innerJoin('agentWork', 'agentWork.id', 'executions.agentWorkId')
        .select(['agentWork.deliveries', 'agentWork.state'])
        .where('executions.id', 'in', ids)
        .execute();
      assert.deepEqual(
        works.map((work) => [Number(work.deliveries), work.state]),
        ids.map(() => [1, 'done']),
      );
      for (const id of ids) assert.equal((await steps(id)).length, 4);
    } finally {
      second.child.kill('SIGKILL');
      await second.exited;
      await beside.server.close();
      rmSync(otherState, { recursive: true, force: true });
    }
  });
});
