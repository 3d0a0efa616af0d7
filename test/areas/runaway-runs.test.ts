import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { eventually, orchestration, uploadVersion } from '../helpers/executions.ts';
import { MAX_NESTING } from '../../src/agent/pipeline-runner.ts';

const SELF_ITERATOR = orchestration(
  `    Start:
      type: "start"
      transitions:
        unconditional: ["Loop"]
    Loop:
      type: "fixed-iterator"
      iterationTarget: "Loop"
      parameters:
        variablesToIterate: ["v"]
        iterationValues: [["a"], ["b"]]
`,
  `  variables:
    v:
      metadata:
        type: "TEXT"
      defaultValue: "x"
`,
);

/** Two iterators attached to each other. */
const ITERATOR_RING = orchestration(
  `    Start:
      type: "start"
      transitions:
        unconditional: ["One"]
    One:
      type: "fixed-iterator"
      iterationTarget: "Two"
      parameters:
        variablesToIterate: ["v"]
        iterationValues: [["a"]]
    Two:
      type: "retry"
      iterationTarget: "One"
      parameters:
        numberOfRetries: 1
`,
  `  variables:
    v:
      metadata:
        type: "TEXT"
      defaultValue: "x"
`,
);

/** Runs itself through a child named by a variable (which the start cannot follow), each level twice. */
const RECURSIVE = orchestration(
  `    Start:
      type: "start"
      transitions:
        unconditional: ["Twice"]
    Twice:
      type: "fixed-iterator"
      iterationTarget: "Again"
      parameters:
        variablesToIterate: ["v"]
        iterationValues: [["a"], ["b"]]
    Again:
      type: "run-orchestration"
      parameters:
        orchestrationJob: "\${child}"
`,
  `  variables:
    child:
      metadata:
        type: "TEXT"
        scope: "COPIED"
        visibility: "PUBLIC"
      defaultValue: "pipelines/rec"
    v:
      metadata:
        type: "TEXT"
      defaultValue: "x"
`,
);

/**
 * Runaway runs (attack finding 3): an iterator attached to itself, or iterators attached to each other, is
 * refused at the start naming the component and `iterationTarget`; a pipeline that runs itself through a
 * variable (which the start cannot see) is stopped by the agent (here the platform-hosted one) past
 * MAX_NESTING levels, the run FAILED naming the chain, after a bounded number of steps.
 */
describeEachStore('runaway runs', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;

  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, projectId } = await server.prologue({ environments: ['dev'] }));
    await uploadVersion(server, caller, projectId, 'dev', 'v1', {
      'pipelines/selfiter.orch.yaml': SELF_ITERATOR,
      'pipelines/ring.orch.yaml': ITERATOR_RING,
      'pipelines/rec.orch.yaml': RECURSIVE,
    });
  });
  after(() => server.close());

  const start = (pipelineName: string) =>
    server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: 'dev', versionName: 'v1', pipelineName },
    });

  test('an iterator attached to itself, or iterators attached to each other, is refused at the start (400)', async () => {
    const self = expectProblem(await start('pipelines/selfiter'), 400);
    assert.equal(self.violations?.length, 1, JSON.stringify(self));
    assert.match(
      self.violations![0],
      /^pipelines\/selfiter\.orch\.yaml: components\.Loop\.parameters\.iterationTarget: .*iterates over itself/,
      JSON.stringify(self),
    );
    const ring = expectProblem(await start('pipelines/ring'), 400);
    assert.match(
      ring.violations![0],
      /^pipelines\/ring\.orch\.yaml: components\.(One|Two)\.parameters\.iterationTarget: .*cycle.*"(One|Two)" → "(One|Two)" → "(One|Two)"/,
      JSON.stringify(ring),
    );
  });

  test('a pipeline that runs itself through a variable fails past the nesting bound, naming the chain', async () => {
    const started = await start('pipelines/rec');
    assert.equal(started.status, 201, started.text);
    const id = started.body.pipelineExecutionId;
    const run = await eventually(
      async () => (await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}`, { token: caller.token })).body,
      (value) => value.status !== 'RUNNING',
      60_000,
    );
    assert.equal(run.status, 'FAILED', JSON.stringify(run));
    // Each level runs its iterator's second value once the first failed, and that fails at once: about
    // four steps per level, not 2^levels.
    const steps: { name: string; result: { status: string; message: string | null } }[] = [];
    for (let page = 0; ; page += 1) {
      const answer = await server.api('GET', `/projects/${projectId}/pipeline-executions/${id}/steps?size=100&page=${page}`, {
        token: caller.token,
      });
      steps.push(...answer.body.results);
      if (answer.body.results.length < 100) break;
    }
    assert.ok(steps.length <= 6 * MAX_NESTING, `${steps.length} steps`);
    const bounded = steps.filter((step) => /more than 32 levels deep/.test(step.result.message ?? ''));
    assert.ok(bounded.length >= 1, JSON.stringify(steps.slice(-6)));
    assert.equal(bounded[0].result.status, 'FAILED');
    assert.match(bounded[0].result.message!, /Twice → pipelines\/rec\.orch\.yaml → Twice \(pipelines\/rec\.orch\.yaml\)/);
  });
});
