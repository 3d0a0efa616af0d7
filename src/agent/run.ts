/**
 * The reference agent: signs in with its credentials, registers its certificate, heartbeats, long-polls
 * for work, runs each piece through the handler registry (handlers.ts) and reports the outcome. Speaks
 * only the documented agent protocol (/dpc/agent/v1), so an agent in another language can do the same.
 */
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { WORK_KINDS, type WorkFailureBody } from '../contract/work.ts';
import { workHandler } from './handlers.ts';
import { WorkFailure, type DeliveredWork, type WorkContext } from './work-context.ts';
import { loadOrCreateIdentity } from './identity.ts';
import { LocalFileVault, type VaultBackend } from './vault.ts';

export interface AgentOptions {
  url: string;
  clientId: string;
  clientSecret: string;
  stateDir: string;
  /** The customer vault; a LocalFileVault in the state folder by default. */
  vault?: VaultBackend;
  /** Whether pipelines may run python-script and bash-script components (off unless asked). */
  allowScripts?: boolean;
  /** A platform-hosted agent: scripts off whatever allowScripts says, the embedded warehouse sandboxed. */
  hosted?: boolean;
  /** PostgreSQL for runs whose environment names no warehouse (the platform-hosted agents on PostgreSQL deployments). */
  defaultWarehouseUrl?: string;
  /** With defaultWarehouseUrl: each account's environment runs as a role of its own, its password derived from this key. */
  warehouseRoleKey?: string;
  /** What serves `s3` streaming targets: `file:///folder` keeps each bucket as a folder there. */
  objectStore?: string;
  /** The Azure Blob endpoint of `abs` streaming targets, `{account}` standing for the account name. */
  blobEndpoint?: string;
  /** The longest one warehouse statement may run, in seconds (default an hour; 0: no bound). */
  statementTimeoutSeconds?: number;
  log?: (level: 'info' | 'warn' | 'error', message: string, fields?: Record<string, unknown>) => void;
  /**
   * How long the server may refuse the agent's credentials without a break before the agent gives up (its
   * `ended` resolves): the agent was deleted or given new credentials. CREDENTIALS_REFUSED_GIVE_UP_MS unless given.
   */
  giveUpAfterRefusedMs?: number;
}

/** How long credentials refused without a break make the agent give up (see AgentOptions.giveUpAfterRefusedMs). */
export const CREDENTIALS_REFUSED_GIVE_UP_MS = 60_000;

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
  /** When the token endpoint began refusing the credentials (401/400) without a token granted since; undefined: it is not. */
  refusedSince?: number;

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
    if (answer.status === 401 || answer.status === 400) this.refusedSince ??= Date.now();
    if (!answer.ok) throw new ProtocolError(`the server refused the agent credentials (${answer.status})`, answer.status);
    this.refusedSince = undefined;
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
      if (answer.status >= 400 && answer.status !== 409) {
        throw new ProtocolError(`${method} ${apiPath} answered ${answer.status}: ${text}`, answer.status);
      }
      return { status: answer.status, body: text ? (JSON.parse(text) as T) : (undefined as T) };
    }
  }
}

/**
 * Whether a failed call may succeed if sent again: the server could not be reached or answered that it is
 * restarting or busy (5xx, 429, 408). Anything else (400, 404, a 401 after a fresh token) will not change.
 */
function isTransient(error: unknown): boolean {
  if (error instanceof ProtocolError) return error.status >= 500 || error.status === 429 || error.status === 408;
  // fetch rejects with a TypeError when the connection is refused or reset; a body cut short is a SyntaxError.
  return error instanceof TypeError || error instanceof SyntaxError;
}

/**
 * 409 answers to a report meaning that the delivery is no longer the agent's to run: it is stopped at once, and
 * nothing more is reported on it (but the final report of cancelled work, which the server still takes).
 */
const ENDED_PROBLEMS = new Set(['work-redelivered', 'work-already-finished', 'work-cancelled', 'work-delivery-unknown']);

/** The problem name of a problem+json body (the last part of its `type`). */
function problemName(body: unknown): string | undefined {
  const type = (body as { type?: unknown } | undefined)?.type;
  return typeof type === 'string' ? type.slice(type.lastIndexOf('/') + 1) : undefined;
}

/** Work the agent holds: how to stop it, and where its reports and its lease stand. */
interface Held {
  workId: string;
  controller: AbortController;
  delivery: number;
  /**
   * Set once the server said this delivery is no longer the agent's to run (cancelled, finished or delivered
   * again): its runner is stopped and no more progress is reported on it; a final report only when cancelled.
   */
  ended?: 'cancelled' | 'finished' | 'redelivered' | 'unknown';
  /** The sequence number of the last report sent (reports of a delivery count from 1). */
  sequence: number;
  /** How long a lease lasts, and when (on this agent's clock) the current one ends unless renewed. */
  leaseMs: number;
  leaseEndsAt: number;
  /**
   * The last report's sending: reports of one piece of work go one after another, in the order made, so
   * that their sequence numbers arrive in order (the server takes a number at or below the last it
   * recorded for a repeat). Concurrent branches and iterations report at once.
   */
  sending: Promise<unknown>;
  /** A streaming pipeline's run: held for as long as the pipeline runs, so not counted against MAX_CONCURRENT_WORK. */
  lasting: boolean;
}

/** A poll's answer. */
type PolledWork = DeliveredWork & { leaseExpiresAt?: string; leaseSeconds?: number };

export interface RunningAgent {
  /** Stops polling, abandons work in hand (it is delivered again once its lease lapses), signs off. */
  stop(): Promise<void>;
  /**
   * Resolves with the reason when the agent gives up by itself: the server refused its credentials for
   * giveUpAfterRefusedMs without a break (it was deleted, or given new credentials). It has stopped by then.
   */
  ended: Promise<string>;
}

export async function runAgent(options: AgentOptions): Promise<RunningAgent> {
  const log = options.log ?? (() => {});
  const client = new AgentClient(options.url.replace(/\/+$/, ''), options.clientId, options.clientSecret);
  const identity = await loadOrCreateIdentity(options.stateDir, `dpc-agent-${options.clientId}`);
  const vault = options.vault ?? new LocalFileVault(path.join(options.stateDir, 'vault.json'));
  await client.call('PUT', '/certificate', { certificate: identity.certificatePem });
  log('info', 'certificate registered');

  const stopping = new AbortController();
  /** Keyed by work id and delivery: a second delivery of the same work is held beside the first, not over it. */
  const inHand = new Map<string, Held>();
  const keyOf = (workId: string, delivery: number) => `${workId}#${delivery}`;

  /** Stops a delivery the server no longer counts as the agent's (see Held.ended). */
  function end(held: Held, reason: NonNullable<Held['ended']>): void {
    if (held.ended) return;
    held.ended = reason;
    log('warn', 'the server ended this delivery; stopping it', { workId: held.workId, delivery: held.delivery, reason });
    held.controller.abort(new Error(`the server says this delivery is no longer the agent's to run (${reason})`));
  }
  /** Resolves the wait of a poll loop held back by MAX_CONCURRENT_WORK once a piece of work ends. */
  let slotFreed: (() => void) | undefined;
  let heartbeatSeconds = 10;

  async function heartbeat(): Promise<void> {
    const sentAt = Date.now();
    const held = [...inHand.values()].filter((work) => !work.ended);
    const answer = await client.call<{
      heartbeatIntervalSeconds: number;
      cancelledWorkIds: string[];
      endedWork?: { workId: string; delivery: number | null; reason: NonNullable<Held['ended']> }[];
    }>('POST', '/heartbeat', {
      heldWork: held.map((work) => ({ workId: work.workId, delivery: work.delivery })),
    });
    heartbeatSeconds = answer.body.heartbeatIntervalSeconds;
    const ended = new Map((answer.body.endedWork ?? []).map((work) => [keyOf(work.workId, work.delivery ?? 0), work.reason]));
    for (const work of held) {
      const reason = ended.get(keyOf(work.workId, work.delivery));
      // The server renewed the lease of each current delivery named.
      if (!reason) work.leaseEndsAt = Math.max(work.leaseEndsAt, sentAt + work.leaseMs);
      // Cancelled work is stopped and still reports its end (the server takes that final report).
      else if (reason === 'cancelled') work.controller.abort(new Error('the server cancelled the work'));
      else end(work, reason);
    }
    const cancelled = new Set(answer.body.cancelledWorkIds);
    for (const work of held) if (cancelled.has(work.workId)) work.controller.abort(new Error('the server cancelled the work'));
  }

  /**
   * Sends a report on held work, numbered within its delivery so that the server applies it once however
   * often it arrives. A report the server could not take (unreachable, restarting, busy) is sent again with
   * backoff until the work's lease ends: after that the work is delivered again and the report is moot. An
   * outage shorter than the lease so loses nothing. `signal` ends the retries early (the work was cancelled).
   */
  function report(
    workId: string,
    held: Held,
    type: 'progress' | 'done' | 'failed',
    body: unknown,
    signal: AbortSignal = stopping.signal,
  ): Promise<void> {
    const sent = held.sending.then(() =>
      // A delivery the server ended is told nothing more (a cancelled one its final report).
      held.ended && (type === 'progress' || held.ended !== 'cancelled') ? undefined : send(workId, held, type, body, signal),
    );
    held.sending = sent.catch(() => undefined);
    return sent;
  }

  async function send(
    workId: string,
    held: Held,
    type: 'progress' | 'done' | 'failed',
    body: unknown,
    signal: AbortSignal,
  ): Promise<void> {
    held.sequence += 1;
    const message = { type, body, delivery: held.delivery, sequence: held.sequence };
    let backoff = 250;
    for (let attempt = 1; ; attempt += 1) {
      const sentAt = Date.now();
      try {
        const answer = await client.call<{ detail?: string }>('POST', `/work/${workId}/reports`, message);
        // 409: already finished, cancelled or delivered again on the server; there is nothing more to tell it,
        // and the delivery is stopped (its runner must not go on with effects the server no longer counts).
        if (answer.status === 409) {
          log('warn', 'report not taken', { workId, type, detail: answer.body?.detail });
          const name = problemName(answer.body);
          if (name !== undefined && ENDED_PROBLEMS.has(name)) {
            end(
              held,
              name === 'work-redelivered'
                ? 'redelivered'
                : name === 'work-cancelled'
                  ? 'cancelled'
                  : name === 'work-delivery-unknown'
                    ? 'unknown'
                    : 'finished',
            );
          }
        } else if (type === 'progress') held.leaseEndsAt = Math.max(held.leaseEndsAt, sentAt + held.leaseMs);
        if (attempt > 1) log('info', 'report taken after retries', { workId, type, sequence: message.sequence, attempt });
        return;
      } catch (error) {
        const left = held.leaseEndsAt - Date.now();
        if (!isTransient(error) || left <= 0 || signal.aborted) throw error;
        log('warn', 'report not delivered; retrying', {
          workId,
          type,
          sequence: message.sequence,
          attempt,
          leaseLeftMs: left,
          message: error instanceof Error ? error.message : String(error),
        });
        await sleep(Math.min(backoff, left), undefined, { signal }).catch(() => undefined);
        backoff = Math.min(RETRY_MAX_MS, backoff * 2);
      }
    }
  }

  async function perform(work: PolledWork, receivedAt: number): Promise<void> {
    const controller = new AbortController();
    const leaseMs =
      work.leaseSeconds !== undefined
        ? work.leaseSeconds * 1000
        : Math.max(0, Date.parse(work.leaseExpiresAt ?? '') - receivedAt) || 60_000;
    const held: Held = {
      workId: work.workId,
      controller,
      delivery: work.delivery,
      sequence: 0,
      leaseMs,
      leaseEndsAt: receivedAt + leaseMs,
      sending: Promise.resolve(),
      lasting: work.kind === WORK_KINDS.startStreamingPipeline,
    };
    const key = keyOf(work.workId, work.delivery);
    inHand.set(key, held);
    const signal = AbortSignal.any([controller.signal, stopping.signal]);
    const context: WorkContext = {
      report: (body) => report(work.workId, held, 'progress', body, signal),
      signal,
      vault,
      privateKey: identity.privateKey,
      stateDir: options.stateDir,
      allowScripts: options.allowScripts === true && options.hosted !== true,
      sandboxed: options.hosted === true,
      statementTimeoutMs: (options.statementTimeoutSeconds ?? 3600) * 1000,
      ...(options.defaultWarehouseUrl && { defaultWarehouseUrl: options.defaultWarehouseUrl }),
      ...(options.warehouseRoleKey && { warehouseRoleKey: options.warehouseRoleKey }),
      ...(options.objectStore && { objectStore: options.objectStore }),
      ...(options.blobEndpoint && { blobEndpoint: options.blobEndpoint }),
      log: (message, fields) => log('info', message, { workId: work.workId, kind: work.kind, ...fields }),
    };
    let outcome: { type: 'done' | 'failed'; body: unknown };
    try {
      const handler = workHandler(work.kind);
      if (!handler)
        throw Object.assign(new Error(`this agent has no handler for work of kind ${work.kind}`), { code: 'unknown-kind' });
      outcome = { type: 'done', body: (await handler(work, context)) ?? null };
    } catch (error) {
      const failedPipelines = error instanceof WorkFailure ? error.failedPipelines : undefined;
      const failure: WorkFailureBody = {
        message: error instanceof Error ? error.message : String(error),
        code: (error as { code?: string }).code,
        ...(failedPipelines && { failedPipelines }),
      };
      if (!stopping.signal.aborted && !held.ended)
        log('warn', 'work failed', { workId: work.workId, kind: work.kind, message: failure.message });
      outcome = { type: 'failed', body: failure };
    }
    try {
      // Work abandoned because the agent stops is not reported: it is delivered again later.
      if (!stopping.signal.aborted) await report(work.workId, held, outcome.type, outcome.body);
    } catch (error) {
      log('error', 'could not report', { workId: work.workId, type: outcome.type, message: String(error) });
    } finally {
      inHand.delete(key);
      slotFreed?.();
    }
  }

  const giveUpAfterMs = options.giveUpAfterRefusedMs ?? CREDENTIALS_REFUSED_GIVE_UP_MS;
  let giveUp: (reason: string) => void = () => undefined;
  const ended = new Promise<string>((resolve) => (giveUp = resolve));

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
        // Credentials refused for long without a break: the agent was deleted or its credentials replaced.
        // Asking again for ever would only count against the address's failed-authentication budget.
        const refusedSince = client.refusedSince;
        if (refusedSince !== undefined && Date.now() - refusedSince >= giveUpAfterMs) {
          const reason = `the server has refused the agent credentials for ${Math.round((Date.now() - refusedSince) / 1000)} s (the agent was deleted or given new credentials)`;
          log('error', 'giving up: the server refuses the agent credentials', { reason });
          stopping.abort(new Error(reason));
          giveUp(reason);
          return;
        }
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
    // A streaming pipeline's run lasts as long as the pipeline: it takes no slot.
    if ([...inHand.values()].filter((held) => !held.lasting).length >= MAX_CONCURRENT_WORK) {
      // Polls again as soon as a piece of work in hand ends (or the agent stops).
      await new Promise<void>((resolve) => {
        const stop = () => resolve();
        stopping.signal.addEventListener('abort', stop, { once: true });
        slotFreed = () => {
          stopping.signal.removeEventListener('abort', stop);
          resolve();
        };
      });
      slotFreed = undefined;
      return 0;
    }
    const answer = await client.call<PolledWork>('GET', `/work?waitSeconds=${POLL_WAIT_SECONDS}`, undefined, stopping.signal);
    if (answer.status === 200) void perform(answer.body, Date.now());
    return 0;
  });
  log('info', 'agent running');

  return {
    ended,
    async stop() {
      stopping.abort(new Error('the agent is stopping'));
      await Promise.all([heartbeats, polls]);
      await client.call('POST', '/disconnect').catch((error) => log('warn', 'could not sign off', { message: String(error) }));
      log('info', 'agent stopped');
    },
  };
}
