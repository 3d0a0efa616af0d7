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

/** Start → wait 2 s → print: a run still going when the same work is delivered to the process again. */
const PIPELINE = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Wait"]
    Wait:
      type: "wait"
      parameters:
        seconds: "2"
      transitions:
        success: ["After"]
    After:
      type: "print-variables"
`);

/**
 * The reference agent holds delivery 1 of a run when the same work comes to it again (delivery 2: its lease
 * lapsed, say the process was stalled). Against a stand-in for the server's side of the protocol: the agent keeps
 * both deliveries in hand, by work id and delivery (the second's end does not drop the first), and once the heartbeat answers that delivery 1 is no longer its to run, it stops it: no further step,
 * no further report on it (attack finding 2).
 */
let server: http.Server;
let url: string;
let stateDir: string;
let agent: RunningAgent | undefined;
const heartbeats: { workId: string; delivery: number }[][] = [];
const reports: { delivery: number; type: string; step?: string; status?: string }[] = [];
let polls = 0;
/** Set once delivery 2's final report came: from then on the heartbeat says delivery 1 is finished. */
let finished = false;

before(async () => {
  stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-agent-second-'));
  const payload: ExecutionPayload = {
    executionId: 'run',
    pipelines: { 'wait.orch.yaml': PIPELINE },
    pipelineName: 'wait.orch.yaml',
    variables: {},
  };
  server = http.createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      const answer = (status: number, value?: unknown) => {
        response.writeHead(status, { 'content-type': status >= 400 ? 'application/problem+json' : 'application/json' });
        response.end(value === undefined ? '' : JSON.stringify(value));
      };
      const route = `${request.method} ${request.url?.split('?')[0]}`;
      if (route === 'POST /oauth/dpc/token') return answer(200, { access_token: 'token', expires_in: 3600 });
      if (route === 'PUT /dpc/agent/v1/certificate')
        return answer(200, { fingerprint256: 'x', notAfter: '2100-01-01T00:00:00Z' });
      if (route === 'POST /dpc/agent/v1/heartbeat') {
        const held = (JSON.parse(body) as { heldWork?: { workId: string; delivery: number }[] }).heldWork ?? [];
        heartbeats.push(held);
        return answer(200, {
          heartbeatIntervalSeconds: 0.2,
          cancelledWorkIds: [],
          endedWork: finished ? held.filter((work) => work.delivery === 1).map((work) => ({ ...work, reason: 'finished' })) : [],
        });
      }
      if (route === 'POST /dpc/agent/v1/disconnect') return answer(204);
      if (route === 'GET /dpc/agent/v1/work') {
        polls += 1;
        // Delivery 1 at once, delivery 2 of the same work half a second later, then nothing.
        if (polls === 1)
          return answer(200, { workId: 'work', kind: WORK_KINDS.executePipeline, payload, delivery: 1, leaseSeconds: 60 });
        if (polls === 2)
          return void setTimeout(
            () => answer(200, { workId: 'work', kind: WORK_KINDS.executePipeline, payload, delivery: 2, leaseSeconds: 60 }),
            500,
          );
        return void setTimeout(() => answer(204), 200);
      }
      if (route === 'POST /dpc/agent/v1/work/work/reports') {
        const report = JSON.parse(body) as {
          delivery: number;
          type: string;
          body?: { step?: { name: string; status: string } };
        };
        reports.push({
          delivery: report.delivery,
          type: report.type,
          step: report.body?.step?.name,
          status: report.body?.step?.status,
        });
        if (report.delivery === 2 && report.type !== 'progress') {
          finished = true;
          return answer(200, { workId: 'work', state: report.type });
        }
        // Delivery 1's reports once the work is finished: refused, as the server refuses them.
        if (finished)
          return answer(409, {
            type: 'https://platform-api.dev/problems/work-redelivered',
            title: 'Conflict',
            status: 409,
            detail: 'delivered again',
          });
        return answer(200, { workId: 'work', state: 'delivered' });
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

test('a second delivery in the same process is held beside the first; the first stops once the server ends it', async () => {
  const logs: string[] = [];
  agent = await runAgent({
    url,
    clientId: 'agent',
    clientSecret: 'secret',
    stateDir,
    log: (level, message, fields) => logs.push(`${level} ${message} ${JSON.stringify(fields ?? {})}`),
  });
  // Delivery 1 waits 2 s; delivery 2 is refused at once (a run is not run twice) and finishes the work.
  await new Promise((resolve) => setTimeout(resolve, 4000));
  assert.ok(finished, `delivery 2 never reported its end:\n${logs.join('\n')}`);
  // Delivery 2's end did not drop delivery 1: a heartbeat after it still named delivery 1 (and so learnt it ended).
  assert.ok(
    logs.some((line) => /the server ended this delivery/.test(line) && /"delivery":1/.test(line)),
    logs.join('\n'),
  );
  // Delivery 1 ran no step after the wait, and reported nothing after it was ended.
  const first = reports.filter((report) => report.delivery === 1);
  assert.ok(!first.some((report) => report.step === 'After'), JSON.stringify(first));
  assert.ok(!first.some((report) => report.type !== 'progress'), `delivery 1 sent a final report: ${JSON.stringify(first)}`);
  // The heartbeats after that hold nothing.
  assert.deepEqual(heartbeats.at(-1), []);
});
