/**
 * Services called directly, with a real store (each store), beside their HTTP tests: what a route would
 * do is done here without one, so a service's rules are seen apart from the HTTP around them.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, insertAgent, uploadVersion } from '../helpers/executions.ts';
import { preparePipelineRun } from '../../src/areas/executions/run-start.ts';
import { AgentProtocol } from '../../src/areas/agents/protocol-service.ts';
import { enqueueAgentWork } from '../../src/areas/agents/work.ts';
import { writeSecretValue } from '../../src/areas/secret-values/service.ts';
import { ProblemError } from '../../src/core/problems.ts';

/** The problem `promise` rejects with (it must reject with one). */
async function problemOf(promise: Promise<unknown>): Promise<ProblemError> {
  const error = await promise.then(
    () => assert.fail('expected a problem'),
    (error: unknown) => error,
  );
  assert.ok(error instanceof ProblemError, String(error));
  return error;
}

describeEachStore('services, called directly', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let agentId: string;
  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, projectId } = await server.prologue());
    agentId = await insertAgent(server, caller.accountId);
    const api = (method: string, path: string, body: unknown) => server.api(method, path, { token: caller.token, body });
    assert.equal(
      (await api('POST', `/projects/${projectId}/environments`, { name: 'prod', defaultAgentId: agentId })).status,
      201,
    );
    const region = { name: 'region', type: 'TEXT', behaviour: 'SHARED', value: 'us' };
    assert.equal((await api('POST', `/projects/${projectId}/variables`, region)).status, 201);
    const override = [{ environmentName: 'prod', value: 'eu' }];
    assert.equal((await api('POST', `/projects/${projectId}/variables/region/environment-overrides`, override)).status, 200);
    await uploadVersion(server, caller, projectId, 'prod', 'v1', { 'pipelines/check.orch.yaml': CHECKING });
  });
  after(() => server.close());

  const run = (overrides: Record<string, unknown> = {}) =>
    preparePipelineRun(server.db, {
      accountId: caller.accountId,
      projectId,
      environmentName: 'prod',
      pipelineName: 'pipelines/check',
      trigger: 'API',
      ...overrides,
    });

  test('run start: the environment, its latest version, the pipeline file, its default agent and the variables as the environment sees them', async () => {
    const prepared = await run();
    assert.equal(prepared.pipelineName, 'pipelines/check.orch.yaml');
    assert.equal(prepared.versionName, 'v1');
    assert.equal(prepared.agentId, agentId);
    assert.deepEqual(Object.keys(prepared.pipelines), ['pipelines/check.orch.yaml']);
    assert.deepEqual({ ...prepared.variables }, { region: 'eu' }, 'the override wins over the project default');
    assert.deepEqual({ ...(await run({ scalarVariables: { region: 'ap' } })).variables }, { region: 'ap' }, 'the request wins');
  });

  test('run start refusals: each says what is wrong, naming the field', async () => {
    assert.equal((await problemOf(run({ environmentName: 'nowhere' }))).status, 404);
    assert.equal((await problemOf(run({ pipelineName: 'pipelines/missing' }))).status, 404);
    assert.equal((await problemOf(run({ versionName: 'v9' }))).status, 404);
    assert.equal((await problemOf(run({ agentId: randomUUID() }))).status, 404);
    const misfit = await problemOf(run({ scalarVariables: { region: 7, nope: 'x' } }));
    assert.equal(misfit.status, 400);
    assert.deepEqual(misfit.options.violations, [
      'scalarVariables.region: must be a string for a TEXT variable',
      'scalarVariables.nope: not a project variable',
    ]);
  });

  test('agent protocol: a poll hands queued work once, a report finishes it, a deleted agent is answered 401', async () => {
    const app = server.server.app;
    const protocol = new AgentProtocol(
      server.db,
      app.store.dialect,
      { connectedWindowSeconds: 30, leaseMs: 60_000, pollMaxWaitSeconds: 1 },
      app.agentWorkReports,
      () => false,
    );
    const agent = await insertAgent(server, caller.accountId);
    assert.equal(await protocol.poll(agent, 0, () => false), undefined, 'nothing queued');
    const workId = await server.db
      .transaction()
      .execute((trx) =>
        enqueueAgentWork(trx, { accountId: caller.accountId, agentId: agent, kind: 'write-secret', payload: { n: 1 } }),
      );
    const work = await protocol.poll(agent, 0, () => false);
    assert.deepEqual([work?.workId, work?.delivery, work?.payload], [workId, 1, { n: 1 }]);
    assert.equal(await protocol.poll(agent, 0, () => false), undefined, 'leased: not handed out twice');
    assert.deepEqual((await protocol.heartbeat(agent, [workId])).cancelledWorkIds, []);
    assert.deepEqual(await protocol.report(agent, workId, { type: 'done', body: {} }), { workId, state: 'done' });
    assert.equal((await problemOf(protocol.report(agent, workId, { type: 'done', body: {} }))).status, 409);
    await server.db.deleteFrom('agents').where('id', '=', agent).execute();
    assert.equal((await problemOf(protocol.poll(agent, 0, () => false))).status, 401);
    assert.equal((await problemOf(protocol.heartbeat(agent, []))).status, 401);
  });

  test('secret write: an agent without a certificate is refused before anything is queued', async () => {
    const context = { db: server.db, timeoutSeconds: 1, connectedWindowSeconds: 30 };
    const write = {
      accountId: caller.accountId,
      agentId,
      secret: { name: 's', key: 'k', type: 'PASSWORD', value: 'v' },
      overwrite: false,
    };
    let queued: string | undefined;
    const problem = await problemOf(writeSecretValue(context, write, (workId) => (queued = workId)));
    assert.equal(problem.status, 409);
    assert.equal(problem.options.name, 'agent-has-no-certificate');
    assert.equal(queued, undefined);
    assert.equal(
      (await problemOf(writeSecretValue(context, { ...write, agentId: randomUUID() }))).status,
      404,
      'another account or no agent',
    );
  });
});
