import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, uploadVersion } from '../helpers/executions.ts';

/**
 * A metadata catalogue's ingestion source (DataHub's matillion_dpc models: MatillionEnvironment,
 * MatillionPipelineExecution, MatillionPipelineExecutionStepResult) and scripts that send every value as a
 * string: the vendor's conventions, read as those clients read them.
 */
describeEachStore("catalogues and scripts: the vendor's conventions", (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let agentId: string;
  const env = 'production';
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, projectId } = await server.prologue());
    const agent = await api('POST', '/agents', {
      name: 'eu-agent',
      agentType: 'CUSTOMER_HOSTED',
      cloudProvider: 'aws',
      deployment: 'eks',
    });
    agentId = agent.body.agentId;
    const created = await api('POST', `/projects/${projectId}/environments`, { name: env, defaultAgentId: agentId });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.body.defaultAgentName, 'eu-agent');
    assert.equal((await api('POST', `/projects/${projectId}/environments`, { name: 'hosted' })).status, 201);
  });
  after(() => server.close());

  const api = (method: string, path: string, body?: unknown) => server.api(method, path, { token: caller.token, body });

  test('environments answer defaultAgentName beside defaultAgentId (none without a default agent)', async () => {
    const listed = (await api('GET', `/projects/${projectId}/environments`)).body.results;
    const byName = new Map(listed.map((e: { name: string }) => [e.name, e]));
    assert.deepEqual([(byName.get(env) as any).defaultAgentId, (byName.get(env) as any).defaultAgentName], [agentId, 'eu-agent']);
    assert.equal((byName.get('hosted') as any).defaultAgentName, undefined);
    // A rename of the agent shows at once.
    assert.equal((await api('PATCH', `/agents/${agentId}`, { name: 'eu-agent-2' })).status, 202);
    const again = (await api('GET', `/projects/${projectId}/environments`)).body.results;
    assert.equal(again.find((e: { name: string }) => e.name === env).defaultAgentName, 'eu-agent-2');
  });

  test('NUMBER values given as numeric strings are accepted wherever values are passed; anything else is still refused', async () => {
    const variables = `/projects/${projectId}/variables`;
    const created = await api('POST', variables, { name: 'batch', type: 'NUMBER', behaviour: 'SHARED', value: '1' });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.body.value, 1);
    const patched = await api('PATCH', `${variables}/batch`, { type: 'NUMBER', behaviour: 'SHARED', value: '-2.5e1' });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.body.value, -25);
    const overrides = await api('POST', `${variables}/batch/environment-overrides`, [
      { environmentName: env, value: '3' },
      { environmentName: 'hosted', value: 'three' },
    ]);
    assert.equal(overrides.status, 200, overrides.text);
    assert.deepEqual(overrides.body.overrides, [{ environmentName: env, value: 3 }]);
    assert.deepEqual(
      overrides.body.failedOverride.map((f: { environmentName: string }) => f.environmentName),
      ['hosted'],
    );
    for (const value of ['', ' 1', '1x', '0x10', 'NaN', 'Infinity', '1e999', true]) {
      const refused = await api('POST', variables, { name: 'bad', type: 'NUMBER', behaviour: 'SHARED', value });
      assert.ok(refused.status === 422 || refused.status === 400, `${JSON.stringify(value)}: ${refused.status}`);
    }
    // TEXT stays strict: a number is not a string.
    expectProblem(await api('POST', variables, { name: 'bad', type: 'TEXT', behaviour: 'SHARED', value: 1 }), 422);
    const stored = (await api('GET', variables)).body.results.find((v: { name: string }) => v.name === 'batch');
    assert.equal(stored.value, -25);
  });

  test('a run started here has trigger API; the account-wide list filters by scheduleId; childPipeline is an object or null', async () => {
    const project = await server.newProject(caller);
    assert.equal((await api('POST', `/projects/${project}/environments`, { name: env, defaultAgentId: agentId })).status, 201);
    for (const [name, type, value] of [
      ['region', 'TEXT', 'eu'],
      ['delay', 'NUMBER', 0],
    ] as const) {
      assert.equal((await api('POST', `/projects/${project}/variables`, { name, type, behaviour: 'SHARED', value })).status, 201);
    }
    await uploadVersion(server, caller, project, env, 'v1', { 'pipelines/check.orch.yaml': CHECKING });
    // A script sends the NUMBER as a string.
    const started = await api('POST', `/projects/${project}/pipeline-executions`, {
      pipelineName: 'pipelines/check',
      environmentName: env,
      scalarVariables: { delay: '0', region: 'eu' },
    });
    assert.equal(started.status, 201, started.text);
    const id = started.body.pipelineExecutionId;
    const refused = expectProblem(
      await api('POST', `/projects/${project}/pipeline-executions`, {
        pipelineName: 'pipelines/check',
        environmentName: env,
        scalarVariables: { delay: 'soon' },
      }),
      400,
    );
    assert.deepEqual(refused.violations, ['scalarVariables.delay: must be a number for a NUMBER variable']);

    const listed = (await api('GET', `/pipeline-executions?pipelineName=pipelines/check.orch.yaml`)).body.results;
    const run = listed.find((r: { pipelineExecutionId: string }) => r.pipelineExecutionId === id);
    assert.equal(run.trigger, 'API');
    assert.equal(run.scheduleId, null);
    assert.deepEqual((await api('GET', `/pipeline-executions?scheduleId=${randomUUID()}`)).body, { results: [], more: null });

    // Steps as an agent reported them: one that ran a child pipeline, one that did not.
    await server.db
      .insertInto('executionSteps')
      .values([
        { executionId: id, position: 0, name: 'Start', status: 'SUCCESS', startedAt: new Date().toISOString() },
        {
          executionId: id,
          position: 1,
          name: 'Run child',
          status: 'SUCCESS',
          startedAt: new Date().toISOString(),
          childPipeline: 'pipelines/child.orch.yaml',
        },
      ])
      .onConflict((oc) => oc.columns(['executionId', 'position']).doNothing())
      .execute();
    const steps = (await api('GET', `/projects/${project}/pipeline-executions/${id}/steps`)).body.results;
    const child = steps.find((step: { name: string }) => step.name === 'Run child');
    assert.deepEqual(child.childPipeline, { name: 'pipelines/child.orch.yaml' });
    for (const step of steps) {
      assert.ok(step.childPipeline === null || (typeof step.childPipeline === 'object' && !Array.isArray(step.childPipeline)));
    }
  });
});
