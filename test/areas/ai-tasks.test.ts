import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import type { Config } from '../../src/core/config.ts';
import { seedRepository } from '../helpers/hosted-repository.ts';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { ScriptedModel } from '../helpers/scripted-model.ts';
import { TOOL_NAMES } from '../../src/areas/ai-tasks/tool-names.ts';
import { CHECKING, insertAgent, uploadVersion } from '../helpers/executions.ts';

const ALL_TOOLS: string[] = [...TOOL_NAMES];

function git(gitDir: string, ...args: string[]): string {
  return execFileSync('git', ['--git-dir', gitDir, ...args], { encoding: 'utf8' }).trim();
}

async function eventually<T>(probe: () => Promise<T>, done: (value: T) => boolean, what: string, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describeEachStore('AI agent tasks', (kind) => {
  let server: TestServer;
  let model: ScriptedModel;
  let caller: Caller;
  let viewer: string;
  let projectId: string;
  let gitDir: string;
  before(async () => {
    model = await ScriptedModel.start();
    server = await TestServer.start(kind, { aiModel: { ...baseLimits(), name: 'scripted', baseUrl: model.baseUrl } });
    ({ caller, viewer, projectId } = await server.prologue({ environments: ['dev'] }));
    gitDir = await seedRepository(server.config, projectId, {
      'README.md': 'Sales pipelines.\n',
      'pipelines/extract.orch.yaml': 'type: "orchestration"\n',
    });
  });
  after(async () => {
    await server.close();
    await model.close();
  });

  const post = (urlPath: string, body?: unknown, token = caller.token) => server.api('POST', urlPath, { token, body });
  const get = (urlPath: string, token = caller.token) => server.api('GET', urlPath, { token });

  function config(overrides: Record<string, unknown> = {}) {
    return {
      name: 'builder',
      environmentName: 'dev',
      mode: 'ACT',
      projectId,
      sourceBranchName: 'main',
      generateBranch: true,
      ...overrides,
    };
  }

  async function startTask(message: string, body: Record<string, unknown> = {}) {
    const answer = await post('/ai/agents/tasks', { agentConfig: config(), message, grantedPermissions: [], ...body });
    assert.equal(answer.status, 201, answer.text);
    return answer.body.taskId as string;
  }

  const task = (taskId: string) => get(`/ai/agents/tasks/${taskId}`).then((answer) => answer.body);
  const settled = (taskId: string, status: string) =>
    eventually(
      () => task(taskId),
      (t) => t.status === status,
      `task ${status}`,
    );

  async function allMessages(taskId: string) {
    const answer = await get(`/ai/agents/tasks/${taskId}/messages?limit=1000`);
    assert.equal(answer.status, 200, answer.text);
    return answer.body.results as { data: Record<string, any>; groupId: string; timestamp: string }[];
  }

  test('E20 ACT task writes a pipeline file and commits it to a generated branch of the project repository', async () => {
    const message = 'Add a pipeline that loads orders.';
    const pipeline = 'type: "orchestration"\nversion: "1.0"\npipeline:\n  components: {}\n';
    model.on(message, [
      { toolCalls: [{ name: 'list_files', arguments: {} }] },
      {
        text: 'Writing it.',
        toolCalls: [
          {
            name: 'write_files',
            arguments: { files: [{ path: 'load_orders.orch.yaml', content: pipeline }], message: 'Add load_orders' },
          },
        ],
      },
      { text: 'Added load_orders.orch.yaml.' },
    ]);
    const created = await post('/ai/agents/tasks', {
      agentConfig: config({ workingDirectory: 'pipelines', graphId: 'graph-1' }),
      message,
      grantedPermissions: [{ toolName: 'list_files' }, { toolName: 'write_files' }],
    });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.body.status, 'RUNNING');
    assert.equal(created.body.agentName, 'builder');
    assert.match(created.body.createdAt, /^\d{4}-\d\d-\d\dT/);
    assert.equal(created.headers.get('location'), `/dpc/v1/ai/agents/tasks/${created.body.taskId}`);

    const done = await settled(created.body.taskId, 'STOPPED');
    const branch = done.agentConfig.targetBranchName as string;
    assert.match(branch, /^ai\/builder-[0-9a-f]{8}$/);
    assert.equal(done.turns, 3);
    assert.equal(done.toolCalls, 2);
    assert.equal(done.agentConfig.graphId, 'graph-1');

    // The commit is in the bare repository, on top of main, with the file in the working directory.
    assert.equal(git(gitDir, 'show', `${branch}:pipelines/load_orders.orch.yaml`) + '\n', pipeline);
    assert.equal(git(gitDir, 'rev-parse', `${branch}^`), git(gitDir, 'rev-parse', 'main'));
    assert.equal(git(gitDir, 'log', '-1', '--format=%s|%an', branch), 'Add load_orders|builder (AI agent)');
    assert.equal(git(gitDir, 'show', 'main:README.md'), 'Sales pipelines.');

    // The model saw the working directory's files, and only files inside it.
    const requests = model.requestsOf(message);
    const listed = JSON.parse(requests[1].messages.find((m) => m.role === 'tool')!.content!);
    assert.deepEqual(listed.files, ['extract.orch.yaml']);
    assert.deepEqual(requests[0].tools!.map((t) => t.function.name).sort(), [...ALL_TOOLS].sort());

    const messages = await allMessages(created.body.taskId);
    const types = messages.map((m) => m.data.type);
    assert.deepEqual(types, [
      'USER_MESSAGE',
      'TOOL_CALL',
      'TOOL_RESULT',
      'AGENT_MESSAGE',
      'TOOL_CALL',
      'TOOL_RESULT',
      'AGENT_MESSAGE',
      'STATUS',
    ]);
    const write = messages.find((m) => m.data.type === 'TOOL_RESULT' && m.data.toolName === 'write_files')!;
    assert.equal(write.data.result.commit, git(gitDir, 'rev-parse', branch));
    assert.equal(write.data.result.created, true);
    // One group per turn of the agent: its text, its calls and their results.
    const writeTurn = messages.filter((m) => m.groupId === write.groupId).map((m) => m.data.type);
    assert.deepEqual(writeTurn, ['AGENT_MESSAGE', 'TOOL_CALL', 'TOOL_RESULT']);
    assert.equal(messages.at(-1)!.data.status, 'STOPPED');
  });

  test('a tool that is not granted stops at a permission request and runs once granted', async () => {
    const message = 'What does the readme say?';
    model.on(message, [
      { toolCalls: [{ name: 'read_file', arguments: { path: 'README.md' } }] },
      { text: 'It says: Sales pipelines.' },
    ]);
    const taskId = await startTask(message, { grantedPermissions: [{ toolName: 'list_files' }] });
    const waiting = await eventually(
      () => task(taskId),
      (t) => t.pendingPermission !== undefined,
      'a permission request',
    );
    assert.equal(waiting.status, 'RUNNING');
    assert.equal(waiting.pendingPermission.toolName, 'read_file');
    assert.equal(waiting.pendingPermission.access, 'READ');
    assert.deepEqual(waiting.pendingPermission.arguments, { path: 'README.md' });
    const request = (await allMessages(taskId)).find((m) => m.data.type === 'PERMISSION_REQUEST')!;
    assert.equal(request.data.toolName, 'read_file');
    assert.equal(model.requestsOf(message).length, 1, 'the model is not called while the task waits');

    expectProblem(
      await post(`/ai/agents/tasks/${taskId}/permissions`, { toolName: 'write_files', granted: true }),
      409,
      'conflict',
    );
    const granted = await post(`/ai/agents/tasks/${taskId}/permissions`, { toolName: 'read_file', granted: true });
    assert.equal(granted.status, 202, granted.text);
    assert.deepEqual(
      granted.body.grantedPermissions.map((p: { toolName: string }) => p.toolName),
      ['list_files', 'read_file'],
    );
    const done = await settled(taskId, 'STOPPED');
    assert.equal(done.pendingPermission, undefined);
    const toolMessage = model.requestsOf(message)[1].messages.find((m) => m.role === 'tool')!;
    assert.equal(JSON.parse(toolMessage.content!).content, 'Sales pipelines.\n');
  });

  test('a refused permission answers the call with an error the model reads', async () => {
    const message = 'Write a file if you may.';
    model.on(message, [
      { toolCalls: [{ name: 'write_files', arguments: { files: [{ path: 'x.txt', content: 'x' }], message: 'x' } }] },
      { text: 'I was not allowed to write.' },
    ]);
    const taskId = await startTask(message);
    await eventually(
      () => task(taskId),
      (t) => t.pendingPermission?.toolName === 'write_files',
      'a permission request',
    );
    assert.equal((await task(taskId)).pendingPermission.access, 'WRITE');
    assert.equal((await post(`/ai/agents/tasks/${taskId}/permissions`, { toolName: 'write_files', granted: false })).status, 202);
    const done = await settled(taskId, 'STOPPED');
    assert.deepEqual(done.grantedPermissions, []);
    const toolMessage = model.requestsOf(message)[1].messages.find((m) => m.role === 'tool')!;
    assert.match(JSON.parse(toolMessage.content!).error, /refused/);
    assert.equal(git(gitDir, 'branch', '--list', done.agentConfig.targetBranchName), '');
  });

  test('E21 stop while the model is thinking: STOPPING, then STOPPED once that step ends; the tools it asked for do not run', async () => {
    const message = 'Take your time.';
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let asked!: () => void;
    const modelAsked = new Promise<void>((resolve) => (asked = resolve));
    model.on(message, async () => {
      asked();
      await released;
      return { toolCalls: [{ name: 'list_environments', arguments: {} }] };
    });
    const taskId = await startTask(message, { grantedPermissions: [{ toolName: 'list_environments' }] });
    await modelAsked;
    const stopping = await post(`/ai/agents/tasks/${taskId}/stop`);
    assert.equal(stopping.status, 202, stopping.text);
    assert.equal(stopping.body.status, 'STOPPING');
    assert.equal((await task(taskId)).status, 'STOPPING');
    const again = expectProblem(await post(`/ai/agents/tasks/${taskId}/stop`), 409, 'conflict');
    assert.match(again.detail, /STOPPING/);
    release();
    const stopped = await settled(taskId, 'STOPPED');
    assert.match(stopped.statusDetail, /user's request/);
    const types = (await allMessages(taskId)).map((m) => m.data.type);
    assert.deepEqual(types, ['USER_MESSAGE', 'STATUS', 'TOOL_CALL', 'STATUS']);
    expectProblem(await post(`/ai/agents/tasks/${taskId}/stop`), 409, 'conflict');
  });

  test('a stopped task takes a follow-up message and runs again', async () => {
    const message = 'Wait for my permission.';
    model.on(message, (turn, request) => {
      if (turn === 0) return { toolCalls: [{ name: 'list_variables', arguments: {} }] };
      return { text: `Follow-up seen: ${request.messages.at(-1)!.content}` };
    });
    const taskId = await startTask(message);
    await eventually(
      () => task(taskId),
      (t) => t.pendingPermission !== undefined,
      'a permission request',
    );
    // Waiting for the user, no step is in progress: the stop is immediate.
    const stopped = await post(`/ai/agents/tasks/${taskId}/stop`);
    assert.equal(stopped.body.status, 'STOPPED');
    assert.equal(stopped.body.pendingPermission, undefined);
    const resumed = await post(`/ai/agents/tasks/${taskId}/messages`, { message: 'Never mind, just say hi.' });
    assert.equal(resumed.status, 202, resumed.text);
    assert.equal(resumed.body.status, 'RUNNING');
    await settled(taskId, 'STOPPED');
    const last = model.requestsOf(message).at(-1)!;
    const tool = last.messages.find((m) => m.role === 'tool')!;
    assert.match(JSON.parse(tool.content!).error, /Not run/);
    const messages = await allMessages(taskId);
    assert.equal(messages.at(-2)!.data.text, 'Follow-up seen: Never mind, just say hi.');
  });

  test('a model that answers garbage ends the task ERRORED with a clear message', async () => {
    const cases = [
      { raw: '{"hello":"world"}', expected: /not a usable chat completion: it has no choices/ },
      { raw: 'I am not JSON', contentType: 'text/plain', expected: /not a usable chat completion: it is not a JSON object/ },
      { raw: '{"choices":[{"message":{"tool_calls":[{"function":{}}]}}]}', expected: /tool call 0 has no id or function name/ },
      { raw: '{"error":{"message":"model not loaded"}}', status: 400, expected: /model server answered 400: .*model not loaded/ },
    ];
    for (const [index, { expected, ...reply }] of cases.entries()) {
      const message = `Garbage ${index}`;
      model.on(message, [reply]);
      const taskId = await startTask(message);
      const errored = await settled(taskId, 'ERRORED');
      assert.match(errored.statusDetail, expected);
      const last = (await allMessages(taskId)).at(-1)!;
      assert.deepEqual([last.data.type, last.data.status], ['STATUS', 'ERRORED']);
      expectProblem(await post(`/ai/agents/tasks/${taskId}/stop`), 409, 'conflict');
      expectProblem(await post(`/ai/agents/tasks/${taskId}/messages`, { message: 'again' }), 409, 'conflict');
    }
  });

  test("another account's task is 404 everywhere", async () => {
    const message = 'Private.';
    model.on(message, [{ text: 'Done.' }]);
    const taskId = await startTask(message);
    const other = await server.newAccount('other');
    for (const answer of [
      await get(`/ai/agents/tasks/${taskId}`, other.token),
      await get(`/ai/agents/tasks/${taskId}/messages`, other.token),
      await post(`/ai/agents/tasks/${taskId}/stop`, undefined, other.token),
      await post(`/ai/agents/tasks/${taskId}/messages`, { message: 'hi' }, other.token),
      await post(`/ai/agents/tasks/${taskId}/permissions`, { toolName: 'read_file', granted: true }, other.token),
    ]) {
      expectProblem(answer, 404, 'not-found');
    }
    // Nor can another account start a task on this project.
    const foreign = await post('/ai/agents/tasks', { agentConfig: config(), message: 'x' }, other.token);
    assert.match(expectProblem(foreign, 404, 'not-found').detail, /Project/);
    expectProblem(await get('/ai/agents/tasks/00000000-0000-4000-8000-000000000000'), 404, 'not-found');
  });

  test('messages page with limit and paginationToken, in order, until more is null', async () => {
    const message = 'Count environments four times.';
    model.on(message, (turn) =>
      turn < 4 ? { text: `Turn ${turn}`, toolCalls: [{ name: 'list_environments', arguments: {} }] } : { text: 'Four.' },
    );
    const taskId = await startTask(message, { grantedPermissions: [{ toolName: 'list_environments' }] });
    await settled(taskId, 'STOPPED');
    const everything = await allMessages(taskId);
    assert.equal(everything.length, 1 + 4 * 3 + 1 + 1);
    const firstPage = await get(`/ai/agents/tasks/${taskId}/messages`);
    assert.equal(firstPage.body.results.length, everything.length <= 25 ? everything.length : 25);
    assert.equal(firstPage.body.more, null);

    const paged: unknown[] = [];
    let token: string | null = null;
    let pages = 0;
    do {
      const answer: any = await get(
        `/ai/agents/tasks/${taskId}/messages?limit=4${token ? `&paginationToken=${encodeURIComponent(token)}` : ''}`,
      );
      assert.equal(answer.status, 200, answer.text);
      assert.ok(answer.body.results.length <= 4);
      paged.push(...answer.body.results);
      token = answer.body.more;
      pages += 1;
    } while (token);
    assert.deepEqual(paged, everything);
    assert.equal(pages, Math.ceil(everything.length / 4));
    const stamps = everything.map((m) => m.timestamp);
    assert.deepEqual([...stamps].sort(), stamps);
    // Each agent turn is one group: its text, its call and the call's result.
    const groups = new Map<string, string[]>();
    for (const m of everything) groups.set(m.groupId, [...(groups.get(m.groupId) ?? []), m.data.type]);
    assert.equal([...groups.values()].filter((g) => g.join() === 'AGENT_MESSAGE,TOOL_CALL,TOOL_RESULT').length, 4);

    expectProblem(await get(`/ai/agents/tasks/${taskId}/messages?paginationToken=nonsense`), 400, 'bad-request');
    expectProblem(await get(`/ai/agents/tasks/${taskId}/messages?limit=0`), 400, 'bad-request');
    expectProblem(await get(`/ai/agents/tasks/${taskId}/messages?limit=1001`), 400, 'bad-request');
    assert.equal((await get(`/ai/agents/tasks/${taskId}/messages?limit=1000`)).status, 200);
  });

  test('E20 validation: duplicate permissions, unknown project or environment, missing source branch, targets, roles', async () => {
    const create = (body: Record<string, unknown>, token = caller.token) =>
      post('/ai/agents/tasks', { agentConfig: config(), message: 'x', ...body }, token);
    const duplicate = expectProblem(
      await create({ grantedPermissions: [{ toolName: 'read_file' }, { toolName: 'list_files' }, { toolName: 'read_file' }] }),
      400,
      'bad-request',
    );
    assert.deepEqual(duplicate.violations, ['body.grantedPermissions.2.toolName: "read_file" is listed more than once']);
    expectProblem(await create({ grantedPermissions: [{ toolName: 'rm_rf' }] }), 400, 'bad-request');
    expectProblem(await create({ message: '' }), 400, 'bad-request');
    const missingMode = expectProblem(await create({ agentConfig: { ...config(), mode: undefined } }), 400, 'bad-request');
    assert.ok(missingMode.violations!.some((v) => v.startsWith('body.agentConfig.mode')));
    expectProblem(await create({ agentConfig: config({ mode: 'YOLO' }) }), 400, 'bad-request');

    const unknownProject = await create({ agentConfig: config({ projectId: '00000000-0000-4000-8000-000000000000' }) });
    expectProblem(unknownProject, 404, 'not-found');
    const unknownEnvironment = expectProblem(
      await create({ agentConfig: config({ environmentName: 'prod' }) }),
      404,
      'not-found',
    );
    assert.match(unknownEnvironment.detail, /prod/);
    const noBranch = expectProblem(
      await create({ agentConfig: config({ sourceBranchName: 'develop' }) }),
      422,
      'unprocessable-entity',
    );
    assert.deepEqual(noBranch.violations, ["body.agentConfig.sourceBranchName: no such branch in the project's repository"]);

    const noTarget = expectProblem(await create({ agentConfig: config({ generateBranch: false }) }), 400, 'bad-request');
    assert.match(noTarget.violations![0], /targetBranchName: is required in ACT mode/);
    expectProblem(await create({ agentConfig: config({ targetBranchName: 'feature' }) }), 400, 'bad-request');
    expectProblem(await create({ agentConfig: config({ mode: 'PLAN' }) }), 400, 'bad-request');
    expectProblem(
      await create({ agentConfig: config({ generateBranch: false, targetBranchName: 'bad..name' }) }),
      400,
      'bad-request',
    );
    expectProblem(await create({ agentConfig: config({ workingDirectory: '../outside' }) }), 400, 'bad-request');

    expectProblem(await create({}, viewer), 403, 'forbidden');
    expectProblem(await post('/ai/agents/tasks', { agentConfig: config(), message: 'x' }, 'not-a-token'), 401, 'unauthorized');
  });

  test('a migration in progress refuses the commit (409, read by the agent); an external repository takes no new task (422)', async () => {
    const project = await server.newProject(caller);
    await post(`/projects/${project}/environments`, { name: 'dev' });
    const repository = await seedRepository(server.config, project, { 'README.md': 'x\n' });
    await server.db
      .insertInto('repositoryMigrations')
      .values({
        id: randomUUID(),
        projectId: project,
        mode: 'MIRROR_PUSH',
        targetCloneUrl: 'https://example.com/target.git',
        targetProvider: 'github',
        targetName: 'target',
        gitCredentialId: null,
        providerParameters: '{}',
        sealedToken: null,
        tokenRotated: 0,
        phase: 'PUSHING',
        status: 'IN_PROGRESS',
        detail: null,
        createdAt: new Date().toISOString(),
        finishedAt: null,
      })
      .execute();
    const message = 'Write during a migration.';
    model.on(message, [
      { toolCalls: [{ name: 'write_files', arguments: { files: [{ path: 'a.txt', content: 'a' }], message: 'a' } }] },
      { text: 'Could not write.' },
    ]);
    const created = await post('/ai/agents/tasks', {
      agentConfig: config({ projectId: project }),
      message,
      grantedPermissions: [{ toolName: 'write_files' }],
    });
    assert.equal(created.status, 201, created.text);
    const done = await settled(created.body.taskId, 'STOPPED');
    const result = (await allMessages(created.body.taskId)).find((m) => m.data.type === 'TOOL_RESULT')!;
    assert.match(result.data.error, /^Refused \(409\): The project's repository is being migrated/);
    assert.equal(git(repository, 'branch', '--list', done.agentConfig.targetBranchName), '');

    await server.db
      .insertInto('projectRepositories')
      .values({
        projectId: project,
        cloneUrl: 'https://example.com/target.git',
        provider: 'github',
        name: 'target',
        gitCredentialId: null,
        sealedToken: null,
        updatedAt: new Date().toISOString(),
      })
      .execute();
    const external = expectProblem(
      await post('/ai/agents/tasks', { agentConfig: config({ projectId: project }), message: 'x' }),
      422,
    );
    assert.deepEqual(external.violations, ["body.agentConfig.projectId: the project's repository is external"]);
  });

  test('run_pipeline starts a run of the environment on its agent and get_pipeline_execution follows it; a refusal reaches the model', async () => {
    const agentId = await insertAgent(server, caller.accountId);
    const environment = await post(`/projects/${projectId}/environments`, { name: 'runs', defaultAgentId: agentId });
    assert.equal(environment.status, 201, environment.text);
    await uploadVersion(server, caller, projectId, 'runs', 'v1', { 'pipelines/check.orch.yaml': CHECKING });
    const variable = { name: 'region', type: 'TEXT', behaviour: 'SHARED', value: 'us' };
    assert.equal((await post(`/projects/${projectId}/variables`, variable)).status, 201);
    const message = 'Run the check pipeline.';
    let runId = '';
    model.on(message, (turn, request) => {
      const lastTool = [...request.messages].reverse().find((m) => m.role === 'tool')?.content ?? '';
      if (turn === 0)
        return { toolCalls: [{ name: 'run_pipeline', arguments: { pipelineName: 'pipelines/nope.orch.yaml', waitSeconds: 0 } }] };
      if (turn === 1) {
        assert.match(lastTool, /nope/);
        return {
          toolCalls: [
            {
              name: 'run_pipeline',
              arguments: { pipelineName: 'pipelines/check.orch.yaml', scalarVariables: { region: 'eu' }, waitSeconds: 0 },
            },
          ],
        };
      }
      if (turn === 2) {
        runId = JSON.parse(lastTool).pipelineExecutionId;
        return { toolCalls: [{ name: 'get_pipeline_execution', arguments: { pipelineExecutionId: runId } }] };
      }
      return { text: `Started ${JSON.parse(lastTool).status}.` };
    });
    const taskId = await startTask(message, {
      agentConfig: config({ environmentName: 'runs' }),
      grantedPermissions: [{ toolName: 'run_pipeline' }, { toolName: 'get_pipeline_execution' }],
    });
    await settled(taskId, 'STOPPED');
    const run = await get(`/projects/${projectId}/pipeline-executions/${runId}`);
    assert.equal(run.status, 200, run.text);
    assert.equal(run.body.pipelineName, 'pipelines/check.orch.yaml');
    assert.equal(run.body.environmentName, 'runs');
    const texts = (await allMessages(taskId)).map((m) => JSON.stringify(m.data));
    assert.ok(
      texts.some((text) => text.includes('Started RUNNING.')),
      texts.join('\n'),
    );
  });

  test('tool arguments nested too deep or too large go back to the model as an error; the task carries on', async () => {
    const message = 'Read with odd arguments.';
    const deep = `{"path":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const large = JSON.stringify({ path: 'x'.repeat(9 * 1024 * 1024) });
    model.on(message, [
      {
        toolCalls: [
          { name: 'read_file', arguments: deep },
          { name: 'read_file', arguments: large },
          { name: 'read_file', arguments: { path: 'README.md' } },
        ],
      },
      { text: 'I will keep my arguments flat.' },
    ]);
    const taskId = await startTask(message, { grantedPermissions: [{ toolName: 'read_file' }] });
    const done = await settled(taskId, 'STOPPED');
    assert.equal(done.statusDetail, 'The agent finished its answer; send a message to carry on.');
    const messages = await allMessages(taskId);
    const results = messages.filter((m) => m.data.type === 'TOOL_RESULT');
    assert.equal(results.length, 3);
    assert.match(results[0].data.error, /nested deeper than 64 levels/);
    assert.match(results[1].data.error, /larger than 8388608 bytes/);
    assert.equal(results[2].data.result.content, 'Sales pipelines.\n');
    // What is stored and shown of the refused calls is an excerpt, not the whole text.
    const calls = messages.filter((m) => m.data.type === 'TOOL_CALL');
    assert.ok(JSON.stringify(calls[0].data).length < 4096);
    assert.ok(JSON.stringify(calls[1].data).length < 4096);
    const tools = model.requestsOf(message)[1].messages.filter((m) => m.role === 'tool');
    assert.match(JSON.parse(tools[0].content!).error, /nested deeper than 64 levels/);
    assert.match(JSON.parse(tools[1].content!).error, /larger than 8388608 bytes/);
  });

  test('PLAN tasks are not offered the writing tools; ACT tasks with a named target branch create it off the source', async () => {
    const plan = 'Plan only.';
    model.on(plan, [{ text: 'My plan: add load_orders.orch.yaml.' }]);
    const planned = await post('/ai/agents/tasks', {
      agentConfig: config({ mode: 'PLAN', generateBranch: false }),
      message: plan,
    });
    assert.equal(planned.status, 201, planned.text);
    const done = await settled(planned.body.taskId, 'STOPPED');
    assert.equal(done.agentConfig.targetBranchName, undefined);
    assert.deepEqual(
      model
        .requestsOf(plan)[0]
        .tools!.map((t) => t.function.name)
        .sort(),
      ALL_TOOLS.filter((name) => name !== 'write_files' && name !== 'run_pipeline').sort(),
    );

    const act = 'Write to feature/x.';
    model.on(act, [
      { toolCalls: [{ name: 'write_files', arguments: { files: [{ path: 'notes/a.txt', content: 'a' }], message: 'a' } }] },
      { toolCalls: [{ name: 'write_files', arguments: { files: [{ path: '../escape.txt', content: 'b' }], message: 'b' } }] },
      { text: 'Done.' },
    ]);
    const taskId = await startTask(act, {
      agentConfig: config({ generateBranch: false, targetBranchName: 'feature/x' }),
      grantedPermissions: [{ toolName: 'write_files' }],
    });
    await settled(taskId, 'STOPPED');
    assert.equal(git(gitDir, 'show', 'feature/x:notes/a.txt'), 'a');
    const results = (await allMessages(taskId)).filter((m) => m.data.type === 'TOOL_RESULT');
    assert.match(results[1].data.error, /outside the working directory/);
  });
});

function baseLimits(): Config['aiModel'] {
  return { timeoutMs: 10_000, maxTurns: 50, maxToolCalls: 200, maxTaskSeconds: 600 };
}

describeEachStore('AI agent task runtime: no model, limits, restarts', (kind) => {
  let model: ScriptedModel;
  const servers: TestServer[] = [];
  before(async () => {
    model = await ScriptedModel.start();
  });
  after(async () => {
    for (const server of servers.reverse()) await server.close();
    await model.close();
  });

  /** A server with an account, a project with environment dev and a repository with branch main. */
  async function setUp(aiModel: Partial<Config['aiModel']>, overrides: Partial<Config> = {}) {
    const server = await TestServer.start(kind, { aiModel: { ...baseLimits(), ...aiModel }, ...overrides });
    servers.push(server);
    const { caller, projectId } = await server.prologue({ environments: ['dev'] });
    await seedRepository(server.config, projectId, { 'README.md': 'hello\n' });
    const start = async (message: string, on: TestServer = server) => {
      const answer = await on.api('POST', '/ai/agents/tasks', {
        token: caller.token,
        body: {
          agentConfig: {
            name: 'a',
            environmentName: 'dev',
            mode: 'ACT',
            projectId,
            sourceBranchName: 'main',
            generateBranch: true,
          },
          message,
          grantedPermissions: ALL_TOOLS.map((toolName) => ({ toolName })),
        },
      });
      assert.equal(answer.status, 201, answer.text);
      return answer.body.taskId as string;
    };
    const task = (taskId: string, on: TestServer = server) =>
      on.api('GET', `/ai/agents/tasks/${taskId}`, { token: caller.token }).then((answer) => answer.body);
    const settled = (taskId: string, status: string, on: TestServer = server) =>
      eventually(
        () => task(taskId, on),
        (t) => t.status === status,
        `task ${status}`,
      );
    return { server, caller, start, task, settled };
  }

  test('with no model configured a task ends ERRORED saying so', async () => {
    const { start, settled } = await setUp({ name: undefined });
    const errored = await settled(await start('Anyone there?'), 'ERRORED');
    assert.match(errored.statusDetail, /No language model is configured: set DPC_AI_MODEL/);
  });

  test('the turn, tool call and time limits each end the task ERRORED naming the limit', async () => {
    const { start, settled } = await setUp({
      name: 'scripted',
      baseUrl: model.baseUrl,
      maxTurns: 2,
      maxToolCalls: 3,
      maxTaskSeconds: 2,
    });
    model.on('Loop forever.', () => ({ toolCalls: [{ name: 'list_environments', arguments: {} }] }));
    const turns = await settled(await start('Loop forever.'), 'ERRORED');
    assert.match(turns.statusDetail, /turn limit is reached: 2 model calls per task \(DPC_AI_MAX_TURNS\)/);
    assert.equal(turns.turns, 2);

    model.on('Call many tools.', [{ toolCalls: Array.from({ length: 4 }, () => ({ name: 'list_variables', arguments: {} })) }]);
    const calls = await settled(await start('Call many tools.'), 'ERRORED');
    assert.match(calls.statusDetail, /tool call limit is reached: 3 tool calls per task \(DPC_AI_MAX_TOOL_CALLS\)/);

    model.on('Think slowly.', async () => {
      await new Promise((resolve) => setTimeout(resolve, 3000));
      return { text: 'Too late.' };
    });
    const time = await settled(await start('Think slowly.'), 'ERRORED');
    assert.match(time.statusDetail, /time limit is reached: 2 s of work per task \(DPC_AI_MAX_TASK_SECONDS\)/);
  });

  test('a step left by a server that stopped is taken over; one it stopped in three times ends ERRORED saying why', async () => {
    const aiModel = { name: 'scripted', baseUrl: model.baseUrl };
    // The first server takes requests but runs no background work: its steps wait as if it had died.
    const { server, start, settled } = await setUp(aiModel, { runJobs: false });
    model.on('Resume me.', [{ text: 'Resumed.' }]);
    model.on('Crash me.', [{ text: 'Never seen.' }]);
    const resumed = await start('Resume me.');
    const crashed = await start('Crash me.');
    // The second step's worker "died" three times in the middle of it: its job is claimed, with an expired lease.
    const { stepJobId } = await server.db
      .selectFrom('aiTasks')
      .select('stepJobId')
      .where('id', '=', crashed)
      .executeTakeFirstOrThrow();
    await server.db
      .updateTable('jobs')
      .set({
        state: 'running',
        lockedBy: 'a-worker-that-died',
        lockedUntil: new Date(Date.now() - 1000).toISOString(),
        attempts: 3,
      })
      .where('id', '=', stepJobId!)
      .execute();

    const next = await TestServer.startBeside(server, { runJobs: true });
    servers.push(next);
    assert.equal((await settled(resumed, 'STOPPED', next)).turns, 1);
    const errored = await settled(crashed, 'ERRORED', next);
    assert.match(errored.statusDetail, /server stopped 3 times in the middle of a step/);
  });

  test('a graceful shutdown abandons the model call in progress; the step runs again on the next server', async () => {
    const aiModel = { name: 'scripted', baseUrl: model.baseUrl };
    const { server, caller, start, settled } = await setUp(aiModel);
    let calls = 0;
    let asked!: () => void;
    const firstCall = new Promise<void>((resolve) => (asked = resolve));
    model.on('Survive a restart.', async () => {
      calls += 1;
      if (calls === 1) {
        asked();
        await new Promise((resolve) => setTimeout(resolve, 5000));
      }
      return { text: `Answered on call ${calls}.` };
    });
    const taskId = await start('Survive a restart.');
    await firstCall;
    const closing = Date.now();
    await server.server.close(); // the process stops; its store stays
    assert.ok(Date.now() - closing < 4000, 'the shutdown does not wait for the model');

    const next = await TestServer.startBeside(server);
    servers.push(next);
    assert.equal((await settled(taskId, 'STOPPED', next)).turns, 1);
    const messages = await next.api('GET', `/ai/agents/tasks/${taskId}/messages`, { token: caller.token });
    assert.equal(messages.body.results.at(-2).data.text, 'Answered on call 2.');
  });
});
