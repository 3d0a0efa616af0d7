import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, insertAgent, orchestration, runsChild, uploadVersion } from '../helpers/executions.ts';

/**
 * What a run start refuses and how it says so, through a real server (attack findings, low severity): a
 * pipeline file too large or nested too deep says which and names the file; a run of a transformation
 * pipeline is a 400 naming `body.pipelineName`; a test run's missing name is a body violation.
 */

/** A run that starts, then one parameter that holds `value` (YAML text). */
const withParameter = (value: string) =>
  orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Print"]
    Print:
      type: "print-variables"
      parameters:
        prefixText: ${value}
`);

const TRANSFORMATION = 'type: "transformation"\npipeline:\n  components:\n    Read:\n      type: "table-input"\n';

describeEachStore('run start refusals', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  const env = 'test';

  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
    projectId = await server.newProject(caller);
    const agentId = await insertAgent(server, caller.accountId);
    const created = await server.api('POST', `/projects/${projectId}/environments`, {
      token: caller.token,
      body: { name: env, defaultAgentId: agentId },
    });
    assert.equal(created.status, 201, created.text);
    await uploadVersion(server, caller, projectId, env, 'v1', {
      'pipelines/check.orch.yaml': CHECKING,
      'pipelines/check.test.orch.yaml': CHECKING,
      // 120,000 list items and not one alias: well under the byte bound, over the node bound.
      'pipelines/many.orch.yaml': withParameter(`[${Array(120_000).fill('1').join(',')}]`),
      // Nested 5,000 deep: once answered with the parser's "Maximum call stack size exceeded".
      'pipelines/deep.orch.yaml': withParameter(`${'['.repeat(5000)}${']'.repeat(5000)}`),
      'pipelines/runs-deep.orch.yaml': runsChild('pipelines/deep'),
      'pipelines/load.tran.yaml': TRANSFORMATION,
    });
  });
  after(() => server.close());

  const start = (body: Record<string, unknown>) =>
    server.api('POST', `/projects/${projectId}/pipeline-executions`, {
      token: caller.token,
      body: { environmentName: env, ...body },
    });
  const startTest = (body: Record<string, unknown>) =>
    server.api('POST', `/projects/${projectId}/test-executions`, {
      token: caller.token,
      body: { environmentName: env, ...body },
    });

  test('a large file without aliases is refused as too many nodes, naming the file, not as aliases expanding', async () => {
    const problem = expectProblem(await start({ pipelineName: 'pipelines/many' }), 422);
    assert.equal(
      problem.detail,
      'Pipeline "pipelines/many.orch.yaml" cannot run: The pipeline file is larger than 100000 YAML nodes.',
    );
    assert.doesNotMatch(problem.detail!, /alias/);
  });

  test('a deeply nested file is refused as nested too deep (the limit named), and the server goes on', async () => {
    const problem = expectProblem(await start({ pipelineName: 'pipelines/deep' }), 422);
    assert.equal(
      problem.detail,
      'Pipeline "pipelines/deep.orch.yaml" cannot run: The pipeline file is nested more than 100 levels deep.',
    );
    // A child that deep is named as the child, in the run's violations.
    const child = expectProblem(await start({ pipelineName: 'pipelines/runs-deep' }), 400);
    assert.deepEqual(child.violations, ['pipelines/deep.orch.yaml: The pipeline file is nested more than 100 levels deep.']);
    assert.doesNotMatch(JSON.stringify([problem, child]), /call stack/i);
    assert.equal((await start({ pipelineName: 'pipelines/check' })).status, 201, 'the server still starts runs');
  });

  test('a transformation pipeline is not run: 400 naming body.pipelineName, only orchestration pipelines run', async () => {
    for (const pipelineName of ['pipelines/load.tran.yaml', 'pipelines/elsewhere.tran.yaml']) {
      const problem = expectProblem(await start({ pipelineName }), 400);
      assert.equal(problem.violations?.length, 1);
      assert.match(problem.violations![0], /^body\.pipelineName: only orchestration pipelines run; /);
      assert.match(problem.detail!, /only orchestration pipelines/);
    }
    const tests = expectProblem(await startTest({ scope: 'PIPELINE', pipelineName: 'pipelines/load.tran.yaml' }), 400);
    assert.match(tests.violations![0], /^body\.pipelineName: only orchestration pipelines run; /);
  });

  test("a test run's missing name is named as a body member, as every other body violation", async () => {
    assert.deepEqual(expectProblem(await startTest({ scope: 'TEST' }), 400).violations, [
      'body.testName: required for scope TEST',
    ]);
    assert.deepEqual(expectProblem(await startTest({ scope: 'PIPELINE' }), 400).violations, [
      'body.pipelineName: required for scope PIPELINE',
    ]);
    // The schema's own violations of the same body, for comparison.
    const schema = expectProblem(await startTest({ scope: 'NONE' }), 400);
    assert.match(schema.violations![0], /^body\.scope: /);
  });
});
