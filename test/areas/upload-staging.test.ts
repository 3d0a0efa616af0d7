import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';

describeEachStore('upload staging', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let projectId: string;
  let stagingDir: string;
  before(async () => {
    server = await TestServer.start(kind);
    stagingDir = path.join(server.config.dataDir, 'staging');
    ({ caller, projectId } = await server.prologue({ environments: ['test'] }));
  });
  after(() => server.close());

  test('uploads are staged in the data folder, not the OS temp folder, and leave nothing there', async () => {
    assert.ok(existsSync(stagingDir), 'made at start');
    const form = new FormData();
    form.append('a.sql', new Blob(['select 1;'], { type: 'text/plain' }), 'a.sql');
    const answer = await server.api('POST', `/projects/${projectId}/artifacts`, {
      token: caller.token,
      body: form,
      headers: { versionName: 'v1', environmentName: 'test' },
    });
    assert.equal(answer.status, 200, answer.text);
    assert.deepEqual(readdirSync(stagingDir), []);
  });

  test('at start, what a process that ended left staged is swept; what a running one stages is kept', async () => {
    // Linux pids stay below 2^22: this process cannot be running.
    const dead = path.join(stagingDir, 'upload-999999999-abc');
    const alive = path.join(stagingDir, `upload-${process.pid}-def`);
    for (const dir of [dead, alive]) {
      mkdirSync(dir, { recursive: true });
      writeFileSync(path.join(dir, 'parts'), Buffer.alloc(1024));
    }
    writeFileSync(path.join(stagingDir, 'stray'), 'x');
    const beside = await TestServer.startBeside(server);
    try {
      assert.deepEqual(readdirSync(stagingDir), [path.basename(alive)]);
    } finally {
      await beside.close();
    }
  });
});
