import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { TestServer, Caller } from './harness.ts';

/** An orchestration pipeline in the artifact's format, from components (and variables) given as YAML lines. */
export function orchestration(components: string, variables = ''): string {
  return `type: "orchestration"\nversion: "1.0"\npipeline:\n  components:\n${components}${variables}`;
}

/**
 * start → a run-orchestration (component "Child") of the child pipeline `child` (a path, with or without its
 * suffix), with the pipeline's `variables` block when given.
 */
export function runsChild(child: string, variables = ''): string {
  return orchestration(
    `    Start:
      type: "start"
      transitions:
        unconditional: ["Child"]
    Child:
      type: "run-orchestration"
      parameters:
        orchestrationJob: "${child}"
`,
    variables,
  );
}

/** start → wait `${delay}` seconds → end success. */
export const WAITING = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Wait"]
    Wait:
      type: "wait"
      parameters:
        seconds: "\${delay}"
      transitions:
        success: ["End Success"]
    End Success:
      type: "end-success"
`);

/** start → assert region == eu → end success, else end failure. */
export const CHECKING = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Print"]
    Print:
      type: "print-variables"
      transitions:
        success: ["Check region"]
    Check region:
      type: "assert-scalar-variables"
      parameters:
        assertions:
          - ["region", "==", "eu"]
      transitions:
        success: ["End Success"]
        failure: ["End Failure"]
    End Success:
      type: "end-success"
    End Failure:
      type: "end-failure"
`);

/** An agent row of the account, as the agents area keeps it (created directly: this is not the agents API). */
export async function insertAgent(server: TestServer, accountId: string): Promise<string> {
  const id = randomUUID();
  await server.db
    .insertInto('agents')
    .values({
      id,
      accountId,
      name: `agent ${id.slice(0, 8)}`,
      description: null,
      agentType: 'HYBRID',
      cloudProvider: 'aws',
      deployment: 'fargate',
      status: 'RUNNING',
      pausedUntil: null,
      clientId: null,
      secretHash: null,
      certificatePem: null,
      lastContactAt: null,
      createdAt: new Date().toISOString(),
    })
    .execute();
  return id;
}

/** Uploads `files` as version `versionName` of the environment. */
export async function uploadVersion(
  server: TestServer,
  caller: Caller,
  projectId: string,
  environmentName: string,
  versionName: string,
  files: Record<string, string>,
): Promise<void> {
  const form = new FormData();
  for (const [path, content] of Object.entries(files)) form.append(path, new Blob([content], { type: 'text/plain' }), 'file');
  const answer = await server.api('POST', `/projects/${projectId}/artifacts`, {
    token: caller.token,
    body: form,
    headers: { versionName, environmentName },
  });
  assert.equal(answer.status, 200, answer.text);
}

/** Polls `read` until `done` holds of its answer (at most `ms`). */
export async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 15_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > until) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
