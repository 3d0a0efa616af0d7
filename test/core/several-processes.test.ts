import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('several server processes on one store', (kind) => {
  let first: TestServer;
  let second: TestServer;
  let caller: Caller;
  before(async () => {
    first = await TestServer.start(kind);
    second = await TestServer.startBeside(first);
    caller = await first.newAccount();
  });
  after(async () => {
    await second.close();
    await first.close();
  });

  test('a token issued by one process is accepted by the other; data written by one is read by the other', async () => {
    const token = await second.token(caller.clientId, caller.clientSecret);
    const projectId = await first.newProject({ ...caller, token });
    const read = await second.api('GET', `/projects/${projectId}`, { token: caller.token });
    assert.equal(read.status, 200);
  });

  test('a list or project read by one process shows a write by the other at once (no stale page is given again)', async () => {
    const projectId = await first.newProject(caller);
    const names = async (server: TestServer) =>
      (await server.api('GET', `/projects/${projectId}/environments`, { token: caller.token })).body.results.map(
        (environment: { name: string }) => environment.name,
      );
    for (let round = 0; round < 3; round += 1) {
      assert.deepEqual(
        await names(first),
        Array.from({ length: round }, (_, i) => `env-${i}`),
      );
      const created = await second.api('POST', `/projects/${projectId}/environments`, {
        token: caller.token,
        body: { name: `env-${round}` },
      });
      assert.equal(created.status, 201);
    }
    assert.deepEqual(await names(first), ['env-0', 'env-1', 'env-2']);
    assert.equal((await first.api('GET', `/projects/${projectId}`, { token: caller.token })).status, 200);
    assert.equal((await second.api('DELETE', `/projects/${projectId}`, { token: caller.token })).status, 204);
    expectProblem(await first.api('GET', `/projects/${projectId}`, { token: caller.token }), 404, 'not-found');
    expectProblem(await first.api('GET', `/projects/${projectId}/environments`, { token: caller.token }), 404, 'not-found');
  });

  test('uniqueness holds across processes under concurrent writes', async () => {
    const answers = await Promise.all(
      [first, second, first, second].map((server) =>
        server.api('POST', '/projects', { token: caller.token, body: { name: 'raced' } }),
      ),
    );
    assert.deepEqual(answers.map((a) => a.status).sort(), [201, 409, 409, 409]);
    for (const answer of answers.filter((a) => a.status === 409)) expectProblem(answer, 409, 'conflict');
  });

  test('after a key rotation in one process, the other verifies tokens of the new key', async () => {
    await second.server.app.tokens.keys.rotate();
    const token = await second.token(caller.clientId, caller.clientSecret);
    assert.equal((await first.api('GET', '/projects', { token })).status, 200);
    assert.equal((await first.api('GET', '/projects', { token: caller.token })).status, 200, 'the old key still verifies');
  });
});
