import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';

/** Many clients at once, across two server processes on one store: nothing lost, nothing doubled, no 500. */
describeEachStore('concurrent writes', (kind) => {
  let first: TestServer;
  let second: TestServer;
  let caller: Caller;
  let projectId: string;
  before(async () => {
    first = await TestServer.start(kind);
    second = await TestServer.startBeside(first);
    ({ caller, projectId } = await first.prologue({ environments: ['dev', 'prod'] }));
  });
  after(async () => {
    await second.close();
    await first.close();
  });

  const servers = () => [first, second];

  test('creating variables at once: each name once, duplicates 409, the total exact', async () => {
    const names = Array.from({ length: 30 }, (_, i) => `var_${i % 20}`); // 10 names twice
    const answers = await Promise.all(
      names.map((name, i) =>
        servers()[i % 2].api('POST', `/projects/${projectId}/variables`, {
          token: caller.token,
          body: { name, type: 'TEXT', behaviour: 'SHARED', value: name },
        }),
      ),
    );
    const statuses = answers.map((a) => a.status);
    assert.equal(statuses.filter((s) => s === 201).length, 20);
    for (const answer of answers.filter((a) => a.status !== 201)) expectProblem(answer, 409, 'conflict');
    const list = await second.api('GET', `/projects/${projectId}/variables?size=100`, { token: caller.token });
    assert.equal(list.body.total, 20);
    assert.equal(list.body.results.length, 20);
  });

  test('writing overrides of one variable at once: every request answers, the last value of each environment stands', async () => {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        servers()[i % 2].api('POST', `/projects/${projectId}/variables/var_0/environment-overrides`, {
          token: caller.token,
          body: [
            { environmentName: 'dev', value: `dev ${i}` },
            { environmentName: 'prod', value: `prod ${i}` },
          ],
        }),
      ),
    );
    assert.deepEqual([...new Set(answers.map((a) => a.status))], [200]);
    const read = await first.api('GET', `/projects/${projectId}/variables/var_0/environment-overrides`, { token: caller.token });
    assert.equal(read.body.overrides.length, 2);
    for (const override of read.body.overrides) assert.match(override.value, new RegExp(`^${override.environmentName} \\d+$`));
  });

  test('deleting a project while its variables are written: every answer is a success or a 404, never a 500', async () => {
    const doomed = await first.newProject(caller);
    const writes = Array.from({ length: 20 }, (_, i) =>
      servers()[i % 2].api('POST', `/projects/${doomed}/variables`, {
        token: caller.token,
        body: { name: `v${i}`, type: 'NUMBER', behaviour: 'COPIED', value: i },
      }),
    );
    const deletion = second.api('DELETE', `/projects/${doomed}`, { token: caller.token });
    const answers = await Promise.all([...writes, deletion]);
    for (const answer of answers) assert.ok([201, 204, 404].includes(answer.status), `${answer.status} ${answer.text}`);
    const left = await first.db.selectFrom('projectVariables').select('id').where('projectId', '=', doomed).execute();
    assert.deepEqual(left, []);
  });

  test('the same artifact version uploaded twice at once: one stored, the other 409', async () => {
    const form = () => {
      const body = new FormData();
      for (let i = 0; i < 50; i += 1)
        body.append(`sql/file-${i}.sql`, new Blob([`select ${i};`], { type: 'text/plain' }), `file-${i}.sql`);
      return body;
    };
    // On SQLite both go to one server: a second in-process server would share this event loop, and its
    // connection's busy wait would stall the first one's upload mid-transaction (separate processes do not).
    const racers = kind === 'sqlite' ? [first, first] : servers();
    const answers = await Promise.all(
      racers.map((server) =>
        server.api('POST', `/projects/${projectId}/artifacts`, {
          token: caller.token,
          body: form(),
          headers: { versionName: 'raced', environmentName: 'dev' },
        }),
      ),
    );
    assert.deepEqual(answers.map((a) => a.status).sort(), [200, 409]);
    expectProblem(
      answers.find((a) => a.status === 409)!,
      409,
      'conflict',
    );
    const details = await first.api('GET', `/projects/${projectId}/artifacts/details?environmentName=dev&versionName=raced`, {
      token: caller.token,
    });
    assert.equal(details.body.assets.length, 50);
  });

  test('secret references and connections of one name created at once: one 201, the rest 409', async () => {
    const references = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        servers()[i % 2].api('POST', `/projects/${projectId}/secret-references/shared-name`, {
          token: caller.token,
          body: { type: 'PASSWORD', secretName: 'vault-secret' },
        }),
      ),
    );
    assert.deepEqual(references.map((a) => a.status).sort(), [201, 409, 409, 409, 409, 409]);
    const connections = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        servers()[i % 2].api('POST', `/projects/${projectId}/connections`, {
          token: caller.token,
          body: { name: 'warehouse', authType: 'GENERIC_SECRET', platformConnectionType: 'COMPONENT_BASIC' },
        }),
      ),
    );
    assert.deepEqual(connections.map((a) => a.status).sort(), [201, 409, 409, 409, 409, 409]);
  });
});
