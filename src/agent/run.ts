/**
 * The reference agent: signs in with its credentials, registers its certificate, heartbeats, long-polls
 * for work, runs each piece through the handler registry (handlers.ts) and reports the outcome. Speaks
 * only the documented agent protocol (/dpc/agent/v1), so an agent in another language can do the same.
 */
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { workHandler } from './handlers.ts';
import type { DeliveredWork, WorkContext } from './work-context.ts';
import { loadOrCreateIdentity } from './identity.ts';
import { LocalFileVault, type VaultBackend } from './vault.ts';

export interface AgentOptions {
  url: string;
  clientId: string;
  clientSecret: string;
  stateDir: string;
  /** The customer vault; a LocalFileVault in the state folder by default. */
  vault?: VaultBackend;
  log?: (level: 'info' | 'warn' | 'error', message: string, fields?: Record<string, unknown>) => void;
}

/** Pieces of work run at once; the agent polls for more only below this. */
const MAX_CONCURRENT_WORK = 4;
const POLL_WAIT_SECONDS = 20;
const RETRY_MAX_MS = 5000;

class ProtocolError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** The agent's side of the protocol: a token from its credentials (renewed before it expires, or on a 401), and JSON calls. */
class AgentClient {
  private token?: { value: string; renewAt: number };

  constructor(
    private readonly base: string,
    private readonly clientId: string,
    private readonly clientSecret: string,
  ) {}

  private async bearer(): Promise<string> {
    if (this.token && this.token.renewAt > Date.now()) return this.token.value;
    const answer = await fetch(`${this.base}/oauth/dpc/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: this.clientId, client_secret: this.clientSecret }),
    });
    if (!answer.ok) throw new ProtocolError(`the server refused the agent credentials (${answer.status})`, answer.status);
    const body = (await answer.json()) as { access_token: string; expires_in: number };
    this.token = { value: body.access_token, renewAt: Date.now() + (body.expires_in * 1000) / 2 };
    return this.token.value;
  }

  /** A call to /dpc/agent/v1 + `path`; answers the status and the JSON body (undefined for 204). */
  async call<T>(method: string, apiPath: string, body?: unknown, signal?: AbortSignal): Promise<{ status: number; body: T }> {
    for (let attempt = 0; ; attempt += 1) {
      const answer = await fetch(`${this.base}/dpc/agent/v1${apiPath}`, {
        method,
        signal,
        headers: {
          authorization: `Bearer ${await this.bearer()}`,
          ...(body !== undefined && { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      if (answer.status === 401 && attempt === 0) {
        this.token = undefined;
        continue;
      }
      const text = await answer.text();
      const parsed = text ? (JSON.parse(text) as T) : (undefined as T);
      if (answer.status >= 400 && answer.status !== 409) {
        throw new ProtocolError(`${method} ${apiPath} answered ${answer.status}: ${text}`, answer.status);
      }
      return { status: answer.status, body: parsed };
    }
  }
}

export interface RunningAgent {
  /** Stops polling, abandons work in hand (it is delivered again once its lease lapses), signs off. */
  stop(): Promise<void>;
}

export async function runAgent(options: AgentOptions): Promise<RunningAgent> {
  const log = options.log ?? (() => {});
  const client = new AgentClient(options.url.replace(/\/+$/, ''), options.clientId, options.clientSecret);
  const identity = await loadOrCreateIdentity(options.stateDir, `dpc-agent-${options.clientId}`);
  const vault = options.vault ?? new LocalFileVault(path.join(options.stateDir, 'vault.json'));
  await client.call('PUT', '/certificate', { certificate: identity.certificatePem });
  log('info', 'certificate registered');

  const stopping = new AbortController();
  const inHand = new Map<string, AbortController>();
  let heartbeatSeconds = 10;

  async function heartbeat(): Promise<void> {
    const answer = await client.call<{ heartbeatIntervalSeconds: number; cancelledWorkIds: string[] }>('POST', '/heartbeat', {
      heldWorkIds: [...inHand.keys()],
    });
    heartbeatSeconds = answer.body.heartbeatIntervalSeconds;
    for (const workId of answer.body.cancelledWorkIds) inHand.get(workId)?.abort(new Error('the server cancelled the work'));
  }

  async function report(workId: string, type: 'progress' | 'done' | 'failed', body: unknown): Promise<void> {
    const answer = await client.call<{ detail?: string }>('POST', `/work/${workId}/reports`, { type, body });
    // 409: already finished or cancelled on the server; there is nothing more to tell it.
    if (answer.status === 409) log('warn', 'report not taken', { workId, type, detail: answer.body?.detail });
  }

  async function perform(work: DeliveredWork): Promise<void> {
    const controller = new AbortController();
    inHand.set(work.workId, controller);
    const signal = AbortSignal.any([controller.signal, stopping.signal]);
    const context: WorkContext = {
      report: (body) => report(work.workId, 'progress', body),
      signal,
      vault,
      privateKey: identity.privateKey,
      log: (message, fields) => log('info', message, { workId: work.workId, kind: work.kind, ...fields }),
    };
    try {
      const handler = workHandler(work.kind);
      if (!handler)
        throw Object.assign(new Error(`this agent has no handler for work of kind ${work.kind}`), { code: 'unknown-kind' });
      const result = await handler(work, context);
      if (!stopping.signal.aborted) await report(work.workId, 'done', result ?? null);
    } catch (error) {
      // Work abandoned because the agent stops is not reported: it is delivered again later.
      if (stopping.signal.aborted) return;
      const failure = {
        message: error instanceof Error ? error.message : String(error),
        code: (error as { code?: string }).code,
      };
      log('warn', 'work failed', { workId: work.workId, kind: work.kind, message: failure.message });
      await report(work.workId, 'failed', failure).catch((reportError) =>
        log('error', 'could not report a failure', { workId: work.workId, message: String(reportError) }),
      );
    } finally {
      inHand.delete(work.workId);
    }
  }

  /** Runs `step` until the agent stops, waiting after failures (the server may be restarting). */
  async function loop(name: string, step: () => Promise<number>): Promise<void> {
    let backoff = 250;
    while (!stopping.signal.aborted) {
      try {
        const pause = await step();
        backoff = 250;
        if (pause > 0) await sleep(pause, undefined, { signal: stopping.signal });
      } catch (error) {
        if (stopping.signal.aborted) return;
        log('warn', `${name} failed; retrying`, { message: error instanceof Error ? error.message : String(error) });
        await sleep(backoff, undefined, { signal: stopping.signal }).catch(() => undefined);
        backoff = Math.min(RETRY_MAX_MS, backoff * 2);
      }
    }
  }

  const heartbeats = loop('heartbeat', async () => {
    await heartbeat();
    return heartbeatSeconds * 1000;
  });
  const polls = loop('poll', async () => {
    if (inHand.size >= MAX_CONCURRENT_WORK) return 100;
    const answer = await client.call<DeliveredWork & { delivery: number }>(
      'GET',
      `/work?waitSeconds=${POLL_WAIT_SECONDS}`,
      undefined,
      stopping.signal,
    );
    if (answer.status === 200) void perform(answer.body);
    return 0;
  });
  log('info', 'agent running');

  return {
    async stop() {
      stopping.abort(new Error('the agent is stopping'));
      await Promise.all([heartbeats, polls]);
      await client.call('POST', '/disconnect').catch((error) => log('warn', 'could not sign off', { message: String(error) }));
      log('info', 'agent stopped');
    },
  };
}
