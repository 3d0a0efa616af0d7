import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';
import { GitTarget } from '../helpers/git-target.ts';
import { eventually } from '../helpers/executions.ts';

/**
 * A migration's git runs reach another host, so each has a deadline and a low-speed limit, and follows no
 * redirect (issue 36): a target that accepts the connection and never answers fails the migration within the
 * low-speed time, naming the step, and the project's repository is free again; a target that redirects
 * elsewhere (to a host the outbound rules never checked) fails it too.
 */
describeEachStore('repository migrations to targets that stall or redirect', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let target: GitTarget;
  const sockets = new Set<Socket>();
  const silent = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  let redirecting: http.Server;

  before(async () => {
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    target = await GitTarget.start();
    redirecting = http.createServer((request, response) => {
      response.writeHead(302, { location: `${target.url}${request.url!.replace(/^\/moved\//, '/')}` }).end();
    });
    await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve));
    server = await TestServer.start(kind, {
      outboundAllowedRanges: ['127.0.0.0/8'],
      gitLowSpeedSeconds: 1,
      gitTimeoutMs: 120_000,
    });
    caller = await server.newAccount();
  });
  after(async () => {
    await server.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
    await new Promise((resolve) => redirecting.close(resolve));
    await target.close();
  });

  async function migrate(projectId: string, body: Record<string, unknown>) {
    const started = await server.api('POST', `/projects/${projectId}/repository-migration`, {
      token: caller.token,
      body: { targetName: 'target', targetProvider: 'github', ...body },
    });
    assert.equal(started.status, 202, started.text);
    return eventually(
      async () =>
        (
          await server.api('GET', `/projects/${projectId}/repository-migration/${started.body.migrationId}`, {
            token: caller.token,
          })
        ).body as { status: string; detail?: string },
      (answer) => answer.status !== 'IN_PROGRESS',
      60_000,
    );
  }

  test('a target that never answers: FAILED naming the step, and the project is free again', async () => {
    const projectId = await server.newProject(caller);
    const port = (silent.address() as AddressInfo).port;
    const ended = await migrate(projectId, { mode: 'MIRROR_PUSH', targetCloneUrl: `http://127.0.0.1:${port}/silent.git` });
    assert.equal(ended.status, 'FAILED');
    assert.match(ended.detail ?? '', /^listing the target's branches and tags failed: git ls-remote failed: .*too slow/i);
    // No migration holds the project any more: another may start.
    const again = await server.api('POST', `/projects/${projectId}/repository-migration`, {
      token: caller.token,
      body: {
        targetName: 'target',
        targetProvider: 'github',
        mode: 'RECONFIGURE',
        targetCloneUrl: target.createRepository(`free-${projectId}`),
      },
    });
    assert.equal(again.status, 202, again.text);
  });

  test('a target that redirects elsewhere: not followed, FAILED naming the step', async () => {
    const projectId = await server.newProject(caller);
    const token = target.newToken();
    const connection = await server.api('POST', '/enterprise-oauth-connections', {
      token: caller.token,
      body: { name: `conn ${randomUUID()}`, provider: 'github', type: 'TOKEN', token },
    });
    assert.equal(connection.status, 201, connection.text);
    const name = `redirected-${projectId}`;
    target.createRepository(name);
    const port = (redirecting.address() as AddressInfo).port;
    const ended = await migrate(projectId, {
      mode: 'MIRROR_PUSH',
      targetCloneUrl: `http://127.0.0.1:${port}/moved/${name}.git`,
      targetEnterpriseOauthId: connection.body.id,
    });
    assert.equal(ended.status, 'FAILED', 'the redirect was followed');
    assert.match(ended.detail ?? '', /^listing the target's branches and tags failed: git ls-remote failed/);
  });
});
