import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { runAgent, type RunningAgent } from '../../src/agent/run.ts';
import { WORK_KINDS, type ExecutionPayload } from '../../src/contract/work.ts';
import { orchestration } from '../helpers/executions.ts';

/** Start → six branches at once → `and`: twelve step reports made while other branches run. */
const BRANCHES = Array.from({ length: 6 }, (_, i) => `Branch ${i + 1}`);
const PIPELINE = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: [${BRANCHES.map((name) => `"${name}"`).join(', ')}]
${BRANCHES.map((name) => `    ${name}:\n      type: "print-variables"\n      transitions:\n        success: ["All"]\n`).join('')}    All:
      type: "and"
`);

/**
 * The reference agent against a stand-in for the server's side of the agent protocol that answers each
 * report late: steps of parallel branches make reports at once, and the agent must still send one piece of
 * work's reports one after another, in the order of their sequence numbers (the server takes a number at or
 * below the last it recorded for a repeat, so one overtaken by the next would be lost).
 */
let server: http.Server;
let url: string;
let stateDir: string;
let agent: RunningAgent | undefined;
const reports: { sequence: number; type: string; inFlight: number }[] = [];
let inFlight = 0;
let delivered = false;
let finished: () => void;
const done = new Promise<void>((resolve) => (finished = resolve));

before(async () => {
  stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-order-'));
  server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      const answer = (status: number, value?: unknown) => {
        response.writeHead(status, { 'content-type': 'application/json' });
        response.end(value === undefined ? '' : JSON.stringify(value));
      };
      const route = `${request.method} ${request.url?.split('?')[0]}`;
      if (route === 'POST /oauth/dpc/token') return answer(200, { access_token: 'token', expires_in: 3600 });
      if (route === 'PUT /dpc/agent/v1/certificate')
        return answer(200, { fingerprint256: 'x', notAfter: '2100-01-01T00:00:00Z' });
      if (route === 'POST /dpc/agent/v1/heartbeat') return answer(200, { heartbeatIntervalSeconds: 10, cancelledWorkIds: [] });
      if (route === 'POST /dpc/agent/v1/disconnect') return answer(204);
      if (route === 'GET /dpc/agent/v1/work') {
        if (delivered) return void setTimeout(() => answer(204), 200);
        delivered = true;
        const payload: ExecutionPayload = {
          executionId: 'run',
          pipelines: { 'branches.orch.yaml': PIPELINE },
          pipelineName: 'branches.orch.yaml',
          variables: {},
        };
        return answer(200, { workId: 'work', kind: WORK_KINDS.executePipeline, payload, delivery: 1, leaseSeconds: 60 });
      }
      if (route === 'POST /dpc/agent/v1/work/work/reports') {
        const report = JSON.parse(body) as { sequence: number; type: string };
        inFlight += 1;
        reports.push({ sequence: report.sequence, type: report.type, inFlight });
        // Answered late, so that reports made meanwhile would be sent beside it if the agent did not wait.
        return void setTimeout(() => {
          inFlight -= 1;
          answer(200, { workId: 'work', state: report.type === 'progress' ? 'delivered' : report.type });
          if (report.type !== 'progress') finished();
        }, 20);
      }
      answer(404, { title: `no ${route}` });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  await agent?.stop();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  rmSync(stateDir, { recursive: true, force: true });
});

test("parallel branches' reports of one run are sent one at a time, in sequence order", async () => {
  agent = await runAgent({ url, clientId: 'agent', clientSecret: 'secret', stateDir });
  await done;
  // Start and six branches and the `and`: two reports each, then the final one.
  assert.equal(reports.length, 8 * 2 + 1);
  assert.deepEqual(
    reports.map((report) => report.sequence),
    reports.map((_, i) => i + 1),
  );
  assert.deepEqual(
    reports.filter((report) => report.inFlight > 1),
    [],
    'a report was sent while another was unanswered',
  );
  assert.equal(reports.at(-1)!.type, 'done');
});
