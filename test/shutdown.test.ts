import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { scratchStore } from './helpers/harness.ts';
import { freePort, spawnServe } from './helpers/processes.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

describe('shutdown of the server process [sqlite]', () => {
  let env: NodeJS.ProcessEnv;
  let drop: () => Promise<void>;
  before(async () => {
    const scratch = await scratchStore('sqlite');
    drop = scratch.drop;
    env = { DPC_DATA_DIR: scratch.settings.dataDir, DATABASE_URL: '', LOG_LEVEL: 'info' };
  });
  after(() => drop());

  test('a stalled client cannot hold SIGTERM up past DPC_SHUTDOWN_TIMEOUT_MS', async () => {
    const server = await spawnServe({ ...env, DPC_SHUTDOWN_TIMEOUT_MS: '1000' });
    const socket = connect(Number(new URL(server.url).port), '127.0.0.1');
    try {
      // Headers promise a body that never comes.
      socket.write(
        'POST /dpc/v1/projects HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"na',
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      const signalled = Date.now();
      server.child.kill('SIGTERM');
      const code = await Promise.race([
        server.exited,
        new Promise((resolve) => setTimeout(() => resolve('still running'), 8000)),
      ]);
      assert.equal(code, 0);
      assert.ok(Date.now() - signalled >= 900, 'it waited for the request first');
      assert.match(server.logs(), /shutdown deadline passed: closing the connections still open/);
    } finally {
      socket.destroy();
      server.child.kill('SIGKILL');
    }
  });

  test('npm start: SIGTERM to npm stops the server too (no orphan)', async () => {
    const port = await freePort();
    const npm = spawn('npm', ['start'], { cwd: root, env: { ...process.env, ...env, PORT: String(port) }, stdio: 'ignore' });
    const exited = new Promise((resolve) => npm.once('exit', resolve));
    const url = `http://127.0.0.1:${port}/livez`;
    try {
      let up = false;
      for (let i = 0; i < 200 && !up; i += 1) {
        up = await fetch(url).then(
          (answer) => answer.ok,
          () => false,
        );
        if (!up) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.ok(up, 'npm start serves');
      npm.kill('SIGTERM');
      await exited;
      let gone = false;
      for (let i = 0; i < 100 && !gone; i += 1) {
        gone = await fetch(url).then(
          () => false,
          () => true,
        );
        if (!gone) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.ok(gone, 'the server stopped with npm');
    } finally {
      npm.kill('SIGKILL');
    }
  });
});
