import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadOrCreateIdentity } from '../../src/agent/identity.ts';
import type { BenchServer } from '../lib.ts';

/**
 * Runs reported on as an agent reports them: over the agent protocol of a real server (`/dpc/agent/v1`), with
 * the agent's own token and certificate, each report a `POST /work/{workId}/reports` with its delivery and
 * sequence, as the reference agent sends it (src/agent/run.ts). For the benchmarks of what a run-state change
 * costs the server whole: the request (HTTP, the agent's token, the body's validation, the report taken once)
 * and the change it makes.
 */

/** start → end success: a run that the bench reports on step by step itself (the steps are the reports'). */
const PIPELINE = `type: "orchestration"
version: "1.0"
pipeline:
  components:
    Start:
      type: "start"
      transitions:
        unconditional: ["End Success"]
    End Success:
      type: "end-success"
`;

/** A piece of run work in hand: its id, the delivery it came with, and the last report's sequence. */
export interface HeldRun {
  workId: string;
  delivery: number;
  sequence: number;
}

export interface ProtocolAgent {
  /** Starts `count` runs through the API and takes their work over the protocol (not timed). */
  startRuns(count: number): Promise<HeldRun[]>;
  /** Sends one report on `run`, as the agent does; throws unless it was taken (200). */
  report(run: HeldRun, type: 'progress' | 'done', body: unknown): Promise<void>;
  stop(): void;
}

/** A customer-hosted agent of `server`'s account with its credentials and certificate, the default of an environment with a published pipeline. */
export async function protocolAgent(server: BenchServer): Promise<ProtocolAgent> {
  const { projectId } = await server.api('POST', '/projects', { name: 'reports' });
  const { agentId } = await server.api('POST', '/agents', {
    name: 'bench agent',
    agentType: 'CUSTOMER_HOSTED',
    cloudProvider: 'aws',
    deployment: 'fargate',
  });
  const credentials = await server.api('POST', `/agents/${agentId}/credentials`);
  await server.api('POST', `/projects/${projectId}/environments`, { name: 'prod', defaultAgentId: agentId });
  const form = new FormData();
  form.append('pipelines/report.orch.yaml', new Blob([PIPELINE], { type: 'text/plain' }), 'report.orch.yaml');
  const published = await fetch(`${server.url}/dpc/v1/projects/${projectId}/artifacts`, {
    method: 'POST',
    headers: { authorization: `Bearer ${server.token}`, versionName: 'v1', environmentName: 'prod' },
    body: form,
  });
  if (!published.ok) throw new Error(`publishing answered ${published.status}: ${await published.text()}`);

  const tokenAnswer = await fetch(`${server.url}/oauth/dpc/token`, {
    method: 'POST',
    body: new URLSearchParams({
      grant_type: 'client_credentials',
      client_id: credentials.clientId,
      client_secret: credentials.clientSecret,
    }),
  });
  const { access_token: token } = (await tokenAnswer.json()) as { access_token: string };
  const call = async (method: string, apiPath: string, body?: unknown) => {
    const answer = await fetch(`${server.url}/dpc/agent/v1${apiPath}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await answer.text();
    if (!answer.ok) throw new Error(`${method} ${apiPath} answered ${answer.status}: ${text}`);
    return { status: answer.status, body: text ? JSON.parse(text) : undefined };
  };
  const stateDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-agent-'));
  const identity = await loadOrCreateIdentity(stateDir, `dpc-agent-${credentials.clientId}`);
  await call('PUT', '/certificate', { certificate: identity.certificatePem });

  return {
    async startRuns(count) {
      for (let i = 0; i < count; i += 1) {
        await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
          pipelineName: 'pipelines/report',
          environmentName: 'prod',
        });
      }
      const held: HeldRun[] = [];
      while (held.length < count) {
        const polled = await call('GET', '/work?waitSeconds=5');
        if (polled.status !== 200) throw new Error(`only ${held.length} of ${count} runs' work came`);
        held.push({ workId: polled.body.workId, delivery: polled.body.delivery, sequence: 0 });
      }
      return held;
    },
    async report(run, type, body) {
      run.sequence += 1;
      await call('POST', `/work/${run.workId}/reports`, { type, body, delivery: run.delivery, sequence: run.sequence });
    },
    stop() {
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
}
