/**
 * The rules of the agent protocol (protocol.ts is its routes): contact and connection, certificates, long
 * polls for work (bounded per agent and process), leases renewed by heartbeats, and reports on work.
 */
import { X509Certificate } from 'node:crypto';
import type { Dialect, Db } from '../../core/db/database.ts';
import { invalidTokenProblem } from '../../core/auth/plugin.ts';
import { InvalidToken } from '../../core/auth/tokens.ts';
import { badRequest, ProblemError } from '../../core/problems.ts';
import { agentState, setAgentCertificate, signOffAgent } from './repository.ts';
import { isPaused, touchAgent } from './service.ts';
import { claimAgentWork, recordAgentWorkReport, renewAgentWork, type AgentReport, type HeldWork } from './work.ts';
import type { WakeListener } from '../../core/outbox-wakeups.ts';

/** Where a waiting poll learns that work was queued for its agent (a ChannelWakeups on AGENT_WORK_CHANNEL). */
export interface WorkWakeups {
  subscribe(listener: WakeListener): () => void;
}

/** A waiting poll's wake-up: `woken` set by a wake-up since it last looked, `wake` ends its current wait. */
interface Waiter {
  woken: boolean;
  wake?: () => void;
}
import type { AgentWorkReports } from './work-reports.ts';

/**
 * How often a waiting poll looks for work in the store (shared by every server instance) besides when it is
 * woken: work queued for its agent wakes it at once (AGENT_WORK_CHANNEL); this catches work whose lease
 * lapsed, and wake-ups lost with the listening connection.
 */
const POLL_INTERVAL_MS = 250;
/** How often a waiting poll counts as contact, at most (and at least three times per connected window). */
const CONTACT_EVERY_MS = 5000;
/** Long polls one agent may have waiting at once on one server process; more are refused (429). */
export const MAX_POLLS_PER_AGENT = 4;
/** Smallest RSA key an agent certificate may carry. */
const MIN_RSA_BITS = 2048;

/** The answer to an agent deleted while it talks to the server: as to any token that is no longer valid. */
export const agentGoneProblem = () =>
  invalidTokenProblem(new InvalidToken('the agent was deleted or its credentials were replaced'));

export interface ProtocolSettings {
  /** How long after its last contact an agent counts as connected. */
  connectedWindowSeconds: number;
  /** How long a delivery is leased before it is handed out again. */
  leaseMs: number;
  /** The longest a poll waits, whatever the agent asks. */
  pollMaxWaitSeconds: number;
  /** How often a waiting poll looks for work unwoken (POLL_INTERVAL_MS unless given). */
  pollIntervalMs?: number;
}

/** Checks an agent's certificate: PEM X.509, an RSA key of at least 2048 bits, valid now. */
function parseCertificate(pem: string): X509Certificate {
  let certificate: X509Certificate;
  try {
    certificate = new X509Certificate(pem);
  } catch {
    throw badRequest('The certificate is not a PEM X.509 certificate.', ['body.certificate: is not a PEM X.509 certificate']);
  }
  const key = certificate.publicKey;
  if (key.asymmetricKeyType !== 'rsa' || (key.asymmetricKeyDetails?.modulusLength ?? 0) < MIN_RSA_BITS) {
    throw badRequest('The certificate must carry an RSA public key of at least 2048 bits.', [
      `body.certificate: the public key is ${key.asymmetricKeyType}, not RSA of ${MIN_RSA_BITS} bits or more`,
    ]);
  }
  const at = Date.now();
  if (Date.parse(certificate.validFrom) > at || Date.parse(certificate.validTo) <= at) {
    throw badRequest('The certificate is not valid now.', [
      `body.certificate: valid from ${certificate.validFrom} to ${certificate.validTo}`,
    ]);
  }
  return certificate;
}

export class AgentProtocol {
  /** Long polls waiting per agent on this process (MAX_POLLS_PER_AGENT at most). */
  readonly #pollsWaiting = new Map<string, number>();
  readonly #contactEveryMs: number;
  /** The waiting polls of each agent on this process, to be woken when work is queued for it. */
  readonly #waiters = new Map<string, Set<Waiter>>();
  readonly #unsubscribe: () => void;

  constructor(
    private readonly db: Db,
    private readonly dialect: Dialect,
    private readonly settings: ProtocolSettings,
    private readonly reports: AgentWorkReports,
    /** True once the server is shutting down: waiting polls answer at once. */
    private readonly shuttingDown: () => boolean,
    wakeups: WorkWakeups,
  ) {
    this.#contactEveryMs = Math.min(CONTACT_EVERY_MS, (settings.connectedWindowSeconds * 1000) / 3);
    this.#unsubscribe = wakeups.subscribe((agentIds) => {
      const sets = agentIds === 'all' ? [...this.#waiters.values()] : agentIds.map((id) => this.#waiters.get(id));
      for (const set of sets) {
        for (const waiter of set ?? []) {
          waiter.woken = true;
          waiter.wake?.();
        }
      }
    });
  }

  /** Stops listening for wake-ups (the server closes). */
  close(): void {
    this.#unsubscribe();
  }

  async registerCertificate(agentId: string, pem: string) {
    const certificate = parseCertificate(pem);
    await setAgentCertificate(this.db, agentId, certificate.toString());
    return { fingerprint256: certificate.fingerprint256, notAfter: new Date(certificate.validTo).toISOString() };
  }

  /** Contact; the leases of the work the agent still holds renewed; which of it was cancelled or is no longer its to run. */
  async heartbeat(agentId: string, heldWorkIds: string[], heldWork: HeldWork[] = []) {
    const window = this.settings.connectedWindowSeconds;
    await touchAgent(this.db, agentId);
    const { cancelledWorkIds, endedWork } = await renewAgentWork(
      this.db,
      agentId,
      [...heldWorkIds.map((workId) => ({ workId })), ...heldWork],
      this.settings.leaseMs,
    );
    const row = await agentState(this.db, agentId);
    if (!row) throw agentGoneProblem();
    return {
      agentId,
      agentStatus: isPaused(row) ? 'PAUSED' : row.status,
      heartbeatIntervalSeconds: Math.max(1, Math.floor(window / 3)),
      connectedWindowSeconds: window,
      cancelledWorkIds,
      endedWork,
    };
  }

  /**
   * The next piece of work for the agent, waiting up to `waitSeconds` (capped) for one; undefined when none
   * came, the server is shutting down or the caller went away (`abandoned`). A paused agent gets none. 429
   * when the agent already has MAX_POLLS_PER_AGENT polls waiting on this process; 401 when the agent is
   * deleted meanwhile (as its next request would be).
   */
  async poll(agentId: string, waitSeconds: number, abandoned: () => boolean) {
    const waiting = this.#pollsWaiting.get(agentId) ?? 0;
    if (waiting >= MAX_POLLS_PER_AGENT) {
      throw new ProblemError(
        429,
        `This agent already has ${MAX_POLLS_PER_AGENT} polls waiting on this server; poll again when one of them answers.`,
        { name: 'too-many-polls', headers: { 'retry-after': '1' } },
      );
    }
    this.#pollsWaiting.set(agentId, waiting + 1);
    // Listening from before the first look: work queued while it looks wakes it once more, not never.
    const waiter: Waiter = { woken: false };
    const waiters = this.#waiters.get(agentId) ?? new Set();
    this.#waiters.set(agentId, waiters.add(waiter));
    try {
      return await this.#waitForWork(agentId, waitSeconds, abandoned, waiter);
    } finally {
      const left = (this.#pollsWaiting.get(agentId) ?? 1) - 1;
      if (left > 0) this.#pollsWaiting.set(agentId, left);
      else this.#pollsWaiting.delete(agentId);
      waiters.delete(waiter);
      if (waiters.size === 0 && this.#waiters.get(agentId) === waiters) this.#waiters.delete(agentId);
    }
  }

  /** Waits up to `ms`, or less if the waiter is woken (or was, since it last looked). */
  async #wait(waiter: Waiter, ms: number): Promise<void> {
    if (waiter.woken) return;
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      waiter.wake = resolve;
      timer = setTimeout(resolve, ms);
    });
    clearTimeout(timer);
    waiter.wake = undefined;
  }

  async #waitForWork(agentId: string, waitSeconds: number, abandoned: () => boolean, waiter: Waiter) {
    const { leaseMs } = this.settings;
    const deadline = Date.now() + Math.min(waitSeconds, this.settings.pollMaxWaitSeconds) * 1000;
    let contactAt = 0;
    for (;;) {
      if (Date.now() - contactAt >= this.#contactEveryMs) {
        await touchAgent(this.db, agentId);
        contactAt = Date.now();
      }
      waiter.woken = false;
      const agent = await agentState(this.db, agentId);
      if (!agent) throw agentGoneProblem();
      const work = isPaused(agent) ? undefined : await claimAgentWork(this.db, this.dialect, agentId, leaseMs);
      if (work) {
        return {
          workId: work.id,
          kind: work.kind,
          payload: work.payload,
          delivery: work.deliveries,
          leaseExpiresAt: new Date(Date.now() + leaseMs).toISOString(),
          leaseSeconds: Math.round(leaseMs / 1000),
        };
      }
      const left = deadline - Date.now();
      if (left <= 0 || this.shuttingDown() || abandoned()) return undefined;
      await this.#wait(waiter, Math.min(this.settings.pollIntervalMs ?? POLL_INTERVAL_MS, left));
    }
  }

  /** Records a report on the agent's work (see recordAgentWorkReport); answers the work's state. */
  async report(agentId: string, workId: string, report: AgentReport) {
    const work = await recordAgentWorkReport(this.db, agentId, workId, report, this.settings.leaseMs, this.reports);
    return { workId: work.id, state: work.state };
  }

  signOff(agentId: string): Promise<void> {
    return signOffAgent(this.db, agentId);
  }
}
