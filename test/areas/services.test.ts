/**
 * Services called directly, with a real store (each store), beside their HTTP tests: what a route would
 * do is done here without one, so a service's rules are seen apart from the HTTP around them.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, insertAgent, runsChild, uploadVersion } from '../helpers/executions.ts';
import { preparePipelineRun } from '../../src/areas/executions/run-start.ts';
import { AgentProtocol } from '../../src/areas/agents/protocol-service.ts';
import * as agents from '../../src/areas/agents/service.ts';
import * as schedules from '../../src/areas/schedules/service.ts';
import { hostedAgentOf } from '../../src/areas/agents/hosted.ts';
import { AgentDeletion } from '../../src/areas/agents/deletion.ts';
import { SecretBox } from '../../src/core/secret-box.ts';
import { AGENT_WORK_CHANNEL, enqueueAgentWork, queuedWork } from '../../src/areas/agents/work.ts';
import { ChannelWakeups } from '../../src/core/outbox-wakeups.ts';
import { writeSecretValue } from '../../src/areas/secret-values/service.ts';
import { ProblemError } from '../../src/core/problems.ts';
import * as scim from '../../src/areas/scim/service.ts';
import * as aiTasks from '../../src/areas/ai-tasks/service.ts';
import { updateTask, type TaskRow } from '../../src/areas/ai-tasks/repository.ts';
import * as repositories from '../../src/areas/repositories/service.ts';
import * as projects from '../../src/areas/projects/service.ts';
import * as environments from '../../src/areas/environments/service.ts';
import * as variables from '../../src/areas/variables/service.ts';
import { externalRepositoryOf } from '../../src/areas/repositories/index.ts';
import type { Trx } from '../../src/core/db/database.ts';
import { seedRepository } from '../helpers/hosted-repository.ts';
import { GROUP_SCHEMA, PATCH_OP_SCHEMA, USER_SCHEMA } from '../../src/areas/scim/definitions.ts';

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

  /** The agent protocol as the routes use it, without wake-ups (a poll looks once). */
  const protocolOf = () =>
    new AgentProtocol(
      server.db,
      server.server.app.store.dialect,
      { connectedWindowSeconds: 30, leaseMs: 60_000, pollMaxWaitSeconds: 1 },
      server.server.app.agentWorkReports,
      () => false,
      { subscribe: () => () => undefined },
    );

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

  test('run start: the agent is sent the pipelines the run can reach, all of them when a child is named through a variable', async () => {
    const runs = runsChild;
    const files = {
      'pipelines/main.orch.yaml': runs('pipelines/child'),
      'pipelines/child.orch.yaml': CHECKING,
      'pipelines/unused.orch.yaml': CHECKING,
      'pipelines/dynamic.orch.yaml': runs(
        'pipelines/${which}',
        '  variables:\n    which:\n      metadata:\n        type: "TEXT"\n      defaultValue: "child"\n',
      ),
    };
    await uploadVersion(server, caller, projectId, 'prod', 'v2', files);
    const reached = async (pipelineName: string) =>
      Object.keys((await run({ pipelineName, versionName: 'v2' })).pipelines).sort();
    assert.deepEqual(await reached('pipelines/main'), ['pipelines/child.orch.yaml', 'pipelines/main.orch.yaml']);
    assert.deepEqual(await reached('pipelines/dynamic'), Object.keys(files).sort());
  });

  test('agent protocol: a poll hands queued work once, a report finishes it, a deleted agent is answered 401', async () => {
    const protocol = protocolOf();
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

  test('agent protocol: two reports of one delivery at once keep the higher sequence; the lower one is a repeat', async () => {
    const protocol = protocolOf();
    const agent = await insertAgent(server, caller.accountId);
    const workId = await server.db
      .transaction()
      .execute((trx) =>
        enqueueAgentWork(trx, { accountId: caller.accountId, agentId: agent, kind: 'write-secret', payload: { n: 1 } }),
      );
    assert.equal((await protocol.poll(agent, 0, () => false))?.workId, workId);
    const progress = (sequence: number) => protocol.report(agent, workId, { type: 'progress', body: {}, delivery: 1, sequence });
    const sequenceNow = async () =>
      Number(
        (await server.db.selectFrom('agentWork').select('reportSequence').where('id', '=', workId).executeTakeFirstOrThrow())
          .reportSequence,
      );
    // A writer holds the row while report 5 and then report 4 arrive: both read sequence 0 before either writes.
    const reports: Promise<unknown>[] = [];
    await server.db.transaction().execute(async (trx) => {
      await trx.updateTable('agentWork').set({ reportSequence: 0 }).where('id', '=', workId).execute();
      reports.push(progress(5));
      await new Promise((resolve) => setTimeout(resolve, 150));
      reports.push(progress(4));
      await new Promise((resolve) => setTimeout(resolve, 150));
    });
    await Promise.all(reports);
    assert.equal(await sequenceNow(), 5, 'the later report was overwritten by the earlier one');
    assert.deepEqual(await protocol.report(agent, workId, { type: 'done', body: {}, delivery: 1, sequence: 6 }), {
      workId,
      state: 'done',
    });
  });

  test('agents: placement and unique names, sealed credentials read back until rotated, the hosted agent registered once', async () => {
    const { accountId } = caller;
    const db = server.db;
    const box = SecretBox.fromConfig(server.config);
    const request = { name: 'edge', agentType: 'CUSTOMER_HOSTED', cloudProvider: 'aws', deployment: 'fargate' } as const;
    const misplaced = await problemOf(agents.createAgent(db, accountId, { ...request, deployment: 'aks' }));
    assert.deepEqual(
      [misplaced.status, misplaced.options.violations],
      [422, ['body.deployment: must be one of fargate, eks on aws']],
    );
    const edge = await agents.createAgent(db, accountId, request);
    assert.equal((await problemOf(agents.createAgent(db, accountId, request))).status, 409);
    const other = await agents.createAgent(db, accountId, { ...request, name: 'other' });
    assert.equal((await problemOf(agents.updateAgent(db, accountId, other, { name: 'edge' }))).status, 409);
    assert.equal((await agents.updateAgent(db, accountId, other, { pausedUntil: '2999-01-01T00:00:00Z' })).name, 'other');
    assert.equal(agents.toSummary(await agents.requireAgent(db, accountId, other), 60).agentStatus, 'PAUSED');

    const first = await agents.readAgentCredentials(db, box, accountId, edge);
    assert.deepEqual(await agents.readAgentCredentials(db, box, accountId, edge), first, 'a read never rotates');
    const rotated = await agents.issueAgentCredentials(db, box, accountId, edge);
    assert.notEqual(rotated.clientId, first.clientId);
    assert.deepEqual(await agents.readAgentCredentials(db, box, accountId, edge), rotated);
    const stored = await agents.requireAgent(db, accountId, edge);
    assert.ok(stored.sealedSecret && !stored.sealedSecret.includes(rotated.clientSecret), 'the secret is stored sealed');

    const hosted = await Promise.all([hostedAgentOf(db, accountId), hostedAgentOf(db, accountId)]);
    assert.equal(hosted[0], hosted[1], 'two first needs register one hosted agent');
    assert.equal((await agents.requireAgent(db, accountId, hosted[0])).agentType, 'PLATFORM_HOSTED');
    const { caller: squatter } = await server.prologue({ project: false });
    await agents.createAgent(db, squatter.accountId, { ...request, name: 'platform-hosted' });
    assert.equal(
      (await problemOf(hostedAgentOf(db, squatter.accountId))).status,
      409,
      "a customer agent's name is not taken over",
    );

    await agents.deleteAgent(db, accountId, other, new AgentDeletion());
    assert.equal((await problemOf(agents.requireAgent(db, accountId, other))).status, 404);
    assert.equal((await problemOf(agents.requireAgent(db, squatter.accountId, edge))).status, 404, "another account's agent");
  });

  test('schedules: the expression read in its time zone, unique names, and a due time started once by two tickers at once', async () => {
    const db = server.db;
    const request = { name: 'nightly', pipelineName: 'pipelines/check', environmentName: 'prod', cronExpression: '0 3 * * *' };
    const unreadable = await problemOf(
      schedules.createSchedule(db, projectId, { ...request, cronExpression: 'every day', timezone: 'Mars/Olympus' }),
    );
    assert.equal(unreadable.status, 400);
    assert.deepEqual(
      unreadable.options.violations?.map((violation) => violation.split(':')[0]),
      ['timezone', 'cronExpression'],
    );
    const created = await schedules.createSchedule(db, projectId, { ...request, timezone: 'Europe/Paris' });
    assert.ok(created.nextRunAt && Date.parse(created.nextRunAt) > Date.now());
    assert.equal((await problemOf(schedules.createSchedule(db, projectId, request))).status, 409);
    const disabled = await schedules.updateSchedule(db, projectId, created.scheduleId, { scheduleEnabled: false });
    assert.equal(disabled.nextRunAt, null, 'a disabled schedule has no next run');
    await schedules.updateSchedule(db, projectId, created.scheduleId, { scheduleEnabled: true, cronExpression: '* * * * *' });

    const past = new Date(Date.now() - 1000).toISOString();
    await db.updateTable('schedules').set({ nextRunAt: past }).where('id', '=', created.scheduleId).execute();
    const started = await Promise.all([schedules.runDueSchedules(db, 120_000), schedules.runDueSchedules(db, 120_000)]);
    assert.equal(started[0] + started[1], 1, 'one run for one due time');
    const runs = await db.selectFrom('executions').select('status').where('scheduleId', '=', created.scheduleId).execute();
    assert.equal(runs.length, 1);

    await schedules.deleteSchedule(db, projectId, created.scheduleId);
    assert.equal((await problemOf(schedules.getSchedule(db, projectId, created.scheduleId))).status, 404);
    assert.equal((await problemOf(schedules.deleteSchedule(db, projectId, created.scheduleId))).status, 404);
  });

  test('agent protocol: work queued for an agent wakes its waiting poll (NOTIFY on PostgreSQL), not its next look', async () => {
    const app = server.server.app;
    const wakeups = new ChannelWakeups(app.config.databaseUrl, app.log, AGENT_WORK_CHANNEL, queuedWork);
    // A poll that, unwoken, would look again only after ten minutes: only a wake-up answers it within the test.
    const protocol = new AgentProtocol(
      server.db,
      app.store.dialect,
      { connectedWindowSeconds: 30, leaseMs: 60_000, pollMaxWaitSeconds: 600, pollIntervalMs: 600_000 },
      app.agentWorkReports,
      () => false,
      wakeups,
    );
    try {
      const agent = await insertAgent(server, caller.accountId);
      const other = await insertAgent(server, caller.accountId);
      const polled = protocol.poll(agent, 600, () => false);
      await new Promise((resolve) => setTimeout(resolve, 300)); // the poll has looked once and waits
      const queue = (agentId: string) =>
        server.db
          .transaction()
          .execute((trx) => enqueueAgentWork(trx, { accountId: caller.accountId, agentId, kind: 'write-secret', payload: {} }));
      await queue(other); // another agent's work wakes nothing of this one's (it is not handed out here)
      const workId = await queue(agent);
      assert.equal((await polled)?.workId, workId);
      assert.equal((await protocol.poll(other, 0, () => false))?.kind, 'write-secret', "the other agent's work is still queued");
    } finally {
      protocol.close();
      await wakeups.close();
    }
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

  test('SCIM directory: versions, preconditions, uniqueness, members and their effect on versions, filtered lists', async () => {
    const scope = { db: server.db, dialect: kind, accountId: caller.accountId, base: 'http://scim.test/scim/v2' };
    const all = {};
    const ada = await scim.createUser(scope, { schemas: [USER_SCHEMA], userName: 'ada', displayName: 'Ada' }, all);
    const bob = await scim.createUser(scope, { schemas: [USER_SCHEMA], userName: 'bob' }, all);
    assert.equal(ada.version, 1);
    const taken = await problemOf(scim.createUser(scope, { schemas: [USER_SCHEMA], userName: 'ADA' }, all));
    assert.deepEqual([taken.status, taken.options.scimType], [409, 'uniqueness']);

    const adaId = ada.resource.id as string;
    const bobId = bob.resource.id as string;
    const group = await scim.createGroup(
      scope,
      { schemas: [GROUP_SCHEMA], displayName: 'engineers', members: [{ value: adaId }] },
      all,
    );
    const groupId = group.resource.id as string;
    assert.deepEqual(
      (group.resource.members as { value: string; display: string }[]).map((m) => [m.value, m.display]),
      [[adaId, 'Ada']],
    );
    // Joining a group is a new version of the user: its answer shows its groups.
    assert.equal((await scim.getUser(scope, adaId, all)).version, 2);
    const stranger = await problemOf(
      scim.patchGroup(
        scope,
        groupId,
        { schemas: [PATCH_OP_SCHEMA], Operations: [{ op: 'add', path: 'members', value: [{ value: randomUUID() }] }] },
        undefined,
        all,
      ),
    );
    assert.deepEqual([stranger.status, stranger.options.scimType], [400, 'invalidValue']);

    // A stale If-Match is 412 and writes nothing; the current one passes.
    const stale = await problemOf(
      scim.replaceUser(scope, adaId, { schemas: [USER_SCHEMA], userName: 'ada', displayName: 'Ada L.' }, 'W/"1"', all),
    );
    assert.equal(stale.status, 412);
    const renamed = await scim.replaceUser(
      scope,
      adaId,
      { schemas: [USER_SCHEMA], userName: 'ada', displayName: 'Ada L.' },
      'W/"2"',
      all,
    );
    assert.equal(renamed.version, 3);
    // The group shows the new name, so it is a new version too; a write that changes nothing is not.
    const regrouped = await scim.getGroup(scope, groupId, all);
    assert.equal(regrouped.version, group.version + 1);
    assert.equal(
      (await scim.replaceUser(scope, adaId, { schemas: [USER_SCHEMA], userName: 'ada', displayName: 'Ada L.' }, undefined, all))
        .version,
      3,
    );

    await scim.patchGroup(
      scope,
      groupId,
      {
        schemas: [PATCH_OP_SCHEMA],
        Operations: [
          { op: 'add', path: 'members', value: [{ value: bobId }] },
          { op: 'remove', path: `members[value eq "${adaId}"]` },
        ],
      },
      undefined,
      all,
    );
    const members = ((await scim.getGroup(scope, groupId, all)).resource.members as { value: string }[]).map((m) => m.value);
    assert.deepEqual(members, [bobId]);
    const filtered = await scim.listUsers(scope, { filter: 'userName sw "a"', startIndex: 1, count: 10 });
    assert.deepEqual([filtered.totalResults, filtered.Resources.map((r) => r.userName)], [1, ['ada']]);

    await scim.deleteUser(scope, bobId, undefined);
    assert.equal((await problemOf(scim.getUser(scope, bobId, all))).status, 404);
    assert.deepEqual((await scim.getGroup(scope, groupId, all)).resource.members, []);
    await scim.deleteGroup(scope, groupId, undefined);
    assert.equal((await scim.listGroups(scope, { startIndex: 1, count: 10 })).totalResults, 0);
  });
  test('AI tasks: checked requests, the status table with its messages, permission answers, paging, another account', async () => {
    const db = server.db;
    const { accountId, clientId } = caller;
    await seedRepository(server.config, projectId, { 'README.md': 'hello\n' });
    // The runtime is not started here: the service's part ends where it asks the runtime to schedule a step.
    const scheduled: string[] = [];
    const scheduler = { schedule: async (_trx: Trx, task: TaskRow) => void scheduled.push(task.id) };
    const tasks = new aiTasks.AiTaskService(db, server.config, scheduler);
    const agentConfig = {
      name: 'Builder Bot',
      environmentName: 'prod',
      mode: 'ACT',
      projectId,
      sourceBranchName: 'main',
      generateBranch: true,
    } as const;
    const request = { agentConfig, message: 'hello', grantedPermissions: [] };

    const misfit = await problemOf(
      tasks.create(accountId, clientId, {
        ...request,
        agentConfig: { ...agentConfig, generateBranch: false, workingDirectory: '../up' },
        grantedPermissions: [{ toolName: 'read_file' }, { toolName: 'read_file' }],
      }),
    );
    assert.equal(misfit.status, 400);
    assert.deepEqual(
      misfit.options.violations?.map((violation) => violation.split(':')[0]),
      ['body.grantedPermissions.1.toolName', 'body.agentConfig.targetBranchName', 'body.agentConfig.workingDirectory'],
    );
    const noBranch = await problemOf(
      tasks.create(accountId, clientId, { ...request, agentConfig: { ...agentConfig, sourceBranchName: 'develop' } }),
    );
    assert.equal(noBranch.status, 422);
    assert.equal(
      (
        await problemOf(
          tasks.create(accountId, clientId, { ...request, agentConfig: { ...agentConfig, environmentName: 'nowhere' } }),
        )
      ).status,
      404,
    );
    const external = await server.newProject(caller);
    const environment = { token: caller.token, body: { name: 'prod' } };
    assert.equal((await server.api('POST', `/projects/${external}/environments`, environment)).status, 201);
    await repositories.setExternalRepository(db, accountId, external, {
      cloneUrl: 'https://git.example/a.git',
      provider: 'gitlab',
    });
    const externalRefusal = await problemOf(
      tasks.create(accountId, clientId, { ...request, agentConfig: { ...agentConfig, projectId: external } }),
    );
    assert.deepEqual(
      [externalRefusal.status, externalRefusal.options.violations],
      [422, ["body.agentConfig.projectId: the project's repository is external"]],
    );
    assert.deepEqual(scheduled, [], 'nothing refused is scheduled');

    const created = await tasks.create(accountId, clientId, request);
    assert.equal(created.status, 'RUNNING');
    assert.deepEqual(scheduled, [created.taskId], 'the first step is scheduled');
    const task = await aiTasks.getTask(db, accountId, created.taskId);
    assert.equal(
      task.agentConfig.targetBranchName,
      `ai/builder-bot-${created.taskId.slice(0, 8)}`,
      'the server names the branch',
    );

    assert.equal(
      (await problemOf(tasks.answerPermission(accountId, created.taskId, 'read_file', true))).status,
      409,
      'not waiting',
    );
    // The runtime stops at a permission request like this; granting keeps the tool for the rest of the task.
    const pending = { toolCallId: 'call-1', toolName: 'read_file', access: 'READ', arguments: { path: 'README.md' } };
    await db.transaction().execute((trx) => updateTask(trx, created.taskId, { pendingPermission: JSON.stringify(pending) }));
    assert.equal(
      (await problemOf(tasks.answerPermission(accountId, created.taskId, 'list_files', true))).status,
      409,
      'another tool',
    );
    const granted = await tasks.answerPermission(accountId, created.taskId, 'read_file', true);
    assert.deepEqual([granted.grantedPermissions, granted.pendingPermission], [[{ toolName: 'read_file' }], undefined]);

    const stopped = await tasks.stop(accountId, created.taskId);
    assert.equal(stopped.status, 'STOPPED', 'no step in progress: stopped at once');
    const again = await problemOf(tasks.stop(accountId, created.taskId));
    assert.deepEqual(
      [again.status, again.message],
      [409, 'The task is STOPPED, not RUNNING: only a running task can be stopped.'],
    );
    assert.equal((await tasks.followUp(accountId, created.taskId, 'carry on')).status, 'RUNNING', 'a follow-up runs it again');
    await db.transaction().execute((trx) => aiTasks.moveTask(trx, created.taskId, 'failed', 'a limit'));
    assert.equal((await problemOf(tasks.followUp(accountId, created.taskId, 'more'))).status, 409, 'ERRORED is final');

    const types = (await aiTasks.conversationOf(db, created.taskId)).map(
      (m) => m.parsed.type + ('status' in m.parsed ? ` ${m.parsed.status}` : ''),
    );
    assert.deepEqual(types, [
      'USER_MESSAGE',
      'PERMISSION_ANSWER',
      'STATUS STOPPING',
      'STATUS STOPPED',
      'STATUS RUNNING',
      'USER_MESSAGE',
      'STATUS ERRORED',
    ]);
    const first = await aiTasks.listTaskMessages(db, accountId, created.taskId, { limit: 2 });
    assert.equal(first.results.length, 2);
    const rest = await aiTasks.listTaskMessages(db, accountId, created.taskId, { limit: 100, paginationToken: first.more! });
    assert.deepEqual([rest.results.length, rest.more], [types.length - 2, null]);
    assert.equal(
      (await problemOf(aiTasks.listTaskMessages(db, accountId, created.taskId, { limit: 2, paginationToken: 'x' }))).status,
      400,
    );

    const { caller: stranger } = await server.prologue({ project: false });
    assert.equal(
      (await problemOf(aiTasks.getTask(db, stranger.accountId, created.taskId))).status,
      404,
      "another account's task",
    );
    assert.equal((await problemOf(tasks.stop(stranger.accountId, created.taskId))).status, 404);
  });

  test('repositories: connections checked by type and sealed, unique names, clone URLs without credentials, a provider that fits', async () => {
    const db = server.db;
    const { accountId } = caller;
    const box = SecretBox.fromConfig(server.config);
    const misfit = await problemOf(
      repositories.createGitCredential(db, box, accountId, { name: 'c', provider: 'gitlab', type: 'TOKEN', clientId: 'x' }),
    );
    assert.deepEqual(
      [misfit.status, misfit.options.violations],
      [400, ['body.token: required for type TOKEN', 'body.clientId: not allowed for type TOKEN']],
    );
    const app = await problemOf(
      repositories.createGitCredential(db, box, accountId, { name: 'c', provider: 'github', type: 'APP', clientSecret: 's' }),
    );
    assert.deepEqual(app.options.violations, ['body.clientId: required for type APP']);
    const token = 'glpat-secret-value';
    const credential = await repositories.createGitCredential(db, box, accountId, {
      name: 'ci',
      provider: 'gitlab',
      type: 'TOKEN',
      token,
    });
    assert.deepEqual(
      [credential.name, credential.type, 'token' in credential],
      ['ci', 'TOKEN', false],
      'the secret is never answered',
    );
    const stored = await repositories.requireGitCredential(db, accountId, credential.id);
    assert.ok(!stored.sealedSecret.includes(token), 'the secret is stored sealed');
    assert.equal(box.open(stored.sealedSecret, repositories.sealContext.credential(credential.id)), token);
    const taken = repositories.createGitCredential(db, box, accountId, { name: 'ci', provider: 'github', type: 'TOKEN', token });
    assert.equal((await problemOf(taken)).status, 409);
    assert.deepEqual(
      (await repositories.listGitCredentials(db, accountId)).map((c) => c.id),
      [credential.id],
    );

    for (const [url, why] of [
      ['ftp://git.example/a.git', 'must be an http(s) URL'],
      ['https://user:pw@git.example/a.git', 'must not hold a user name or password'],
      ['https://git.example/a b.git', 'must not contain spaces or control characters (percent-encode them)'],
    ]) {
      const refused = await problemOf(Promise.resolve().then(() => repositories.checkCloneUrl(url, 'cloneUrl')));
      assert.deepEqual([refused.status, refused.options.violations], [400, [`body.cloneUrl: ${why}`]], url);
    }
    const queryToken = await problemOf(
      Promise.resolve().then(() => repositories.checkCloneUrl('https://git.example/a.git?access_token=abc', 'cloneUrl')),
    );
    assert.match(queryToken.options.violations?.[0] ?? '', /^body\.cloneUrl: holds a credential/);

    const project = await server.newProject(caller);
    const cloneUrl = 'https://github.example/team/pipelines.git';
    const wrongProvider = await problemOf(
      repositories.setExternalRepository(db, accountId, project, {
        cloneUrl,
        provider: 'github',
        enterpriseOauthId: credential.id,
      }),
    );
    assert.deepEqual(wrongProvider.options.violations, ['body.enterpriseOauthId: must be a connection for github']);
    assert.equal(await externalRepositoryOf(db, project), undefined, 'a refusal writes nothing');
    await repositories.setExternalRepository(db, accountId, project, {
      cloneUrl,
      provider: 'gitlab',
      name: 'pipelines',
      enterpriseOauthId: credential.id,
    });
    assert.deepEqual(repositories.toProjectRepository('http://dpc.test', project, await externalRepositoryOf(db, project)), {
      hosted: false,
      cloneUrl,
      provider: 'gitlab',
      name: 'pipelines',
      enterpriseOauthId: credential.id,
    });
    assert.deepEqual(repositories.toProjectRepository('http://dpc.test', projectId, undefined), {
      hosted: true,
      cloneUrl: `http://dpc.test/dpc/git/${projectId}.git`,
    });
    assert.equal((await problemOf(repositories.requireMigration(db, project, randomUUID()))).status, 404);

    const { caller: stranger } = await server.prologue({ project: false });
    assert.equal((await problemOf(repositories.requireGitCredential(db, stranger.accountId, credential.id))).status, 404);
    assert.equal((await problemOf(repositories.deleteGitCredential(db, stranger.accountId, credential.id))).status, 404);
    await repositories.deleteGitCredential(db, accountId, credential.id);
    assert.equal((await problemOf(repositories.deleteGitCredential(db, accountId, credential.id))).status, 404);
  });

  test('environments: a default agent of the caller account, unique names, the agent name shown, lists of the caller project only', async () => {
    const db = server.db;
    const { accountId } = caller;
    const inProject = await projects.createProject(db, accountId, caller.clientId, { name: `environments ${randomUUID()}` });
    const page = { page: 0, size: 25 };
    const unknownAgent = await problemOf(
      environments.createEnvironment(db, accountId, inProject, { name: 'dev', defaultAgentId: randomUUID() }),
    );
    assert.equal(unknownAgent.status, 404);
    assert.equal((await environments.listEnvironments(db, accountId, inProject, page)).total, 0, 'nothing is stored');
    const { caller: stranger } = await server.prologue({ project: false });
    const strangersAgent = await insertAgent(server, stranger.accountId);
    assert.equal(
      (await problemOf(environments.createEnvironment(db, accountId, inProject, { name: 'dev', defaultAgentId: strangersAgent })))
        .status,
      404,
      "another account's agent is one the caller cannot see",
    );

    const dev = await environments.createEnvironment(db, accountId, inProject, { name: 'dev', defaultAgentId: agentId });
    assert.equal(dev.defaultAgentId, agentId);
    assert.match(dev.defaultAgentName ?? '', /^agent /);
    assert.equal(dev.description, undefined, 'an absent description is left out, not null');
    assert.equal((await problemOf(environments.createEnvironment(db, accountId, inProject, { name: 'dev' }))).status, 409);
    await environments.createEnvironment(db, accountId, inProject, { name: 'acc', description: 'acceptance' });
    const listed = await environments.listEnvironments(db, accountId, inProject, page);
    assert.deepEqual(
      [listed.total, listed.results.map((environment) => [environment.name, environment.defaultAgentName ?? null])],
      [
        2,
        [
          ['acc', null],
          ['dev', dev.defaultAgentName],
        ],
      ],
    );
    assert.equal((await problemOf(environments.listEnvironments(db, stranger.accountId, inProject, page))).status, 404);

    const found = await environments.requireEnvironment(db, inProject, 'dev');
    assert.deepEqual([found.defaultAgentId, found.warehouse], [agentId, null]);
    assert.equal(await environments.requireEnvironmentId(db, inProject, 'dev'), found.id);
    assert.equal((await problemOf(environments.requireEnvironmentId(db, projectId, 'acc'))).status, 404, 'of another project');
    await environments.deleteEnvironment(db, inProject, 'dev');
    assert.equal((await problemOf(environments.requireEnvironment(db, inProject, 'dev'))).status, 404);
    assert.equal((await problemOf(environments.deleteEnvironment(db, inProject, 'dev'))).status, 404);
  });

  test('variables: values fit their type, unique names, the counted total, overrides of the project environments only, a type change that would misfit refused', async () => {
    const db = server.db;
    const { accountId } = caller;
    const inProject = await projects.createProject(db, accountId, caller.clientId, { name: `variables ${randomUUID()}` });
    for (const name of ['dev', 'prod']) await environments.createEnvironment(db, accountId, inProject, { name });
    const page = { page: 0, size: 25 };
    const total = async () => (await variables.listVariables(db, accountId, inProject, page)).total;

    assert.deepEqual(
      [variables.valueOfType('NUMBER', '-2.5e1'), variables.valueOfType('NUMBER', '1.'), variables.valueOfType('TEXT', 3)],
      [-25, undefined, undefined],
    );
    const misfit = await problemOf(
      variables.createVariable(db, inProject, { name: 'limit', type: 'NUMBER', behaviour: 'SHARED', value: 'many' }),
    );
    assert.deepEqual([misfit.status, misfit.options.violations], [422, ['body.value: must be a number for a NUMBER variable']]);
    const limit = await variables.createVariable(db, inProject, {
      name: 'limit',
      type: 'NUMBER',
      behaviour: 'SHARED',
      value: '1e3',
    });
    assert.equal(limit.value, 1000, 'a numeric string is kept as the number');
    const duplicate = variables.createVariable(db, inProject, { name: 'limit', type: 'TEXT', behaviour: 'COPIED' });
    assert.equal((await problemOf(duplicate)).status, 409);
    assert.equal(await total(), 1, 'a refused create does not move the counter');

    const repeated = await problemOf(
      variables.writeOverrides(db, inProject, 'limit', [
        { environmentName: 'dev', value: 1 },
        { environmentName: 'dev', value: 2 },
      ]),
    );
    assert.deepEqual(
      [repeated.status, repeated.options.violations],
      [400, ['body.1.environmentName: "dev" is listed more than once']],
    );
    const written = await variables.writeOverrides(db, inProject, 'limit', [
      { environmentName: 'prod', value: '5' },
      { environmentName: 'dev', value: 'x' },
      { environmentName: 'qa', value: 1 },
    ]);
    assert.deepEqual(written.overrides, [{ environmentName: 'prod', value: 5 }]);
    assert.deepEqual(
      written.failedOverride.map((failed) => failed.environmentName),
      ['dev', 'qa'],
      'a misfit and an unknown environment are answered, not written',
    );
    const one = await variables.readOverrides(db, accountId, inProject, 'limit', 'prod');
    assert.deepEqual(one, { environmentName: 'prod', value: 5 });
    assert.equal((await problemOf(variables.readOverrides(db, accountId, inProject, 'limit', 'dev'))).status, 404);
    const { caller: stranger } = await server.prologue({ project: false });
    assert.equal((await problemOf(variables.readOverrides(db, stranger.accountId, inProject, 'limit', undefined))).status, 404);

    const retyped = await problemOf(variables.updateVariable(db, inProject, 'limit', { type: 'TEXT', behaviour: 'SHARED' }));
    assert.equal(retyped.status, 422);
    assert.deepEqual(retyped.options.violations, [
      'body.value: the current value must be a string for a TEXT variable; send a new value with the type',
      'environmentName: the override of "prod" must be a string for a TEXT variable',
    ]);
    const all = await variables.readOverrides(db, accountId, inProject, 'limit', undefined);
    assert.ok('overrides' in all && all.type === 'NUMBER' && all.value === 1000, 'a refused update changes nothing');
    const updated = await variables.updateVariable(db, inProject, 'limit', { type: 'NUMBER', behaviour: 'COPIED', value: 7 });
    assert.deepEqual([updated.behaviour, updated.value], ['COPIED', 7]);

    assert.equal((await problemOf(variables.deleteOverride(db, inProject, 'limit', 'dev'))).status, 404, 'no override there');
    assert.equal((await problemOf(variables.deleteOverride(db, inProject, 'limit', 'qa'))).status, 404, 'no such environment');
    await variables.deleteOverride(db, inProject, 'limit', 'prod');
    assert.equal((await problemOf(variables.deleteOverride(db, inProject, 'limit', 'prod'))).status, 404);
    await variables.deleteVariable(db, inProject, 'limit');
    assert.equal(await total(), 0);
    assert.equal((await problemOf(variables.deleteVariable(db, inProject, 'limit'))).status, 404);
    assert.equal(await total(), 0, 'a refused delete does not move the counter');
  });
});
