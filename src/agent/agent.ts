import { hostname } from 'node:os';
import { loadOrCreateIdentity } from './identity.ts';
import { LocalFileVault, type VaultBackend } from './vault.ts';
import { workHandler, WorkFailure, type Work } from './handlers.ts';
// Each kind of work the reference agent does registers its handler when its module loads.
import './write-secret.ts';
import './streaming.ts';

export interface AgentOptions {
  /** The server's root URL (http://host:port). */
  url: string;
  clientId: string;
  clientSecret: string;
  stateDir: string;
  vault?: VaultBackend;
  log?: (message: string, fields?: Record<string, unknown>) => void;
}

export interface RunningAgent {
  /** Stops polling, cancels the work in hand, and waits for its reports. */
  stop(): Promise<void>;
}

/** A failure the server answered; 401 means the credentials no longer work. */
class ServerAnswer extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Speaks the agent protocol (/dpc/agent/v1) with a token it obtains, and renews, with the agent's credentials. */
class ProtocolClient {
  private token?: { value: string; renewAt: number };

  constructor(private readonly options: AgentOptions) {}

  private async signIn(): Promise<string> {
    const response = await fetch(new URL('/oauth/dpc/token', this.options.url), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: this.options.clientId,
        client_secret: this.options.clientSecret,
      }),
    });
    const body = (await response.json()) as { access_token?: string; expires_in?: number; error_description?: string };
    if (!response.ok || !body.access_token) throw new ServerAnswer(response.status, `sign-in refused: ${body.error_description}`);
    this.token = { value: body.access_token, renewAt: Date.now() + (body.expires_in ?? 60) * 500 };
    return body.access_token;
  }

  async call<T>(method: string, path: string, body: unknown, signal?: AbortSignal): Promise<T> {
    const token = this.token && this.token.renewAt > Date.now() ? this.token.value : await this.signIn();
    const response = await fetch(new URL(`/dpc/agent/v1${path}`, this.options.url), {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal,
    });
    const text = await response.text();
    if (response.status === 401) this.token = undefined;
    if (!response.ok) throw new ServerAnswer(response.status, `${method} ${path}: ${response.status} ${text}`);
    return JSON.parse(text) as T;
  }
}

interface AgentState {
  agentStatus: string;
  cancelledWork: string[];
}

/**
 * The reference agent: makes (once) and registers its certificate, then heartbeats and long-polls for
 * work until stopped, running each piece with the handler of its kind and reporting it done or failed.
 * Work the server cancels has its signal aborted. Network failures are retried with a pause.
 */
export async function runAgent(options: AgentOptions): Promise<RunningAgent> {
  const log = options.log ?? (() => {});
  const identity = await loadOrCreateIdentity(options.stateDir, `dpc-agent ${options.clientId} on ${hostname()}`);
  const vault = options.vault ?? new LocalFileVault(options.stateDir);
  const client = new ProtocolClient(options);
  await client.call('PUT', '/certificate', { certificate: identity.certificate });
  log('agent registered its certificate');

  const inHand = new Map<string, { controller: AbortController; done: Promise<void> }>();
  const stopping = new AbortController();
  let heartbeatSeconds = 5;

  const cancel = (state: AgentState) => {
    for (const workId of state.cancelledWork) inHand.get(workId)?.controller.abort();
  };

  const run = (work: Work) => {
    if (inHand.has(work.workId)) return;
    const controller = new AbortController();
    const done = (async () => {
      const handler = workHandler(work.kind);
      let report: { type: 'done' | 'failed'; body: Record<string, unknown> };
      try {
        if (!handler) throw new WorkFailure(`this agent does not do work of kind ${work.kind}`, 'unsupported');
        const context = {
          report: (body: Record<string, unknown>) =>
            client.call<void>('POST', `/work/${work.workId}/reports`, { type: 'progress', body }).then(() => undefined),
          signal: controller.signal,
          vault,
          privateKey: identity.privateKey,
          log,
        };
        report = { type: 'done', body: await handler(work, context) };
      } catch (error) {
        const failure = error as Partial<WorkFailure>;
        report = {
          type: 'failed',
          body: { message: failure.message ?? String(error), ...(failure.code && { code: failure.code }) },
        };
      }
      await reportFinal(client, work.workId, report, log);
      inHand.delete(work.workId);
    })();
    inHand.set(work.workId, { controller, done });
  };

  const heartbeats = (async () => {
    while (!stopping.signal.aborted) {
      try {
        const state = await client.call<AgentState & { heartbeatSeconds: number }>('POST', '/heartbeat', {
          runningWork: [...inHand.keys()],
        });
        heartbeatSeconds = state.heartbeatSeconds;
        cancel(state);
      } catch (error) {
        log('heartbeat failed', { error: (error as Error).message });
      }
      await pause(heartbeatSeconds * 1000, stopping.signal);
    }
  })();

  const polls = (async () => {
    while (!stopping.signal.aborted) {
      try {
        const answer = await client.call<AgentState & { work: Work[] }>('POST', '/work/poll', { max: 5 }, stopping.signal);
        cancel(answer);
        for (const work of answer.work) run(work);
      } catch (error) {
        if (stopping.signal.aborted) break;
        log('poll failed', { error: (error as Error).message });
        await pause(1000, stopping.signal);
      }
    }
  })();

  return {
    async stop() {
      stopping.abort();
      for (const { controller } of inHand.values()) controller.abort();
      await Promise.allSettled([heartbeats, polls, ...[...inHand.values()].map((entry) => entry.done)]);
    },
  };
}

/** The final report of a piece of work, retried while the server cannot be reached; a 409 means it was taken already. */
async function reportFinal(
  client: ProtocolClient,
  workId: string,
  report: { type: 'done' | 'failed'; body: Record<string, unknown> },
  log: NonNullable<AgentOptions['log']>,
): Promise<void> {
  for (let attempt = 1; attempt <= 10; attempt += 1) {
    try {
      await client.call('POST', `/work/${workId}/reports`, report);
      return;
    } catch (error) {
      if (error instanceof ServerAnswer && error.status >= 400 && error.status < 500 && error.status !== 401) {
        log('final report refused', { workId, error: error.message });
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
    }
  }
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
