import { createHmac, randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { now, type Executor } from '../../core/db/database.ts';
import { emit, lastEventId, matches, readEvents, type StoredEvent } from '../../core/outbox.ts';
import { OutboundClient, OutboundError, outboundSettings } from '../../core/outbound.ts';
import { credentialIn, credentialInNamed } from '../../core/credentials.ts';
import { conflict, notFound, ProblemError, unprocessable } from '../../core/problems.ts';
import { pageOf, type PageQuery } from '../../core/paging.ts';
import { runPeriodically } from '../../core/ticker.ts';
import {
  advanceCursor,
  clearFailures,
  countFailure,
  deleteWebhookRow,
  deliveryWithWebhook,
  enabledWebhooks,
  findDelivery,
  findWebhook,
  insertDelivery,
  insertWebhook,
  listDeliveryRows,
  listWebhookRows,
  pendingDeliveries,
  pruneDeliveries,
  recordAttempt,
  reopenDelivery,
  updateWebhookRow,
  type DeliveryRow,
  type WebhookRow,
} from './repository.ts';
import { requireProject } from '../projects/index.ts';
import type { CreateWebhookRequest, UpdateWebhookRequest, Webhook, WebhookDelivery } from './schemas.ts';

export const DELIVERY_JOB = 'webhook-delivery';
/** Events fanned out to one webhook per transaction. */
const FAN_OUT_BATCH = 200;
/**
 * How soon an account whose committed events were held back (PostgreSQL: an older transaction still runs)
 * is read again: nothing wakes the fan-out when that transaction ends (it may have written no event, or be in
 * another database), so it looks again, as the event stream does (event-feed/hub.ts).
 */
const HELD_BACK_MS = 25;
/**
 * What the delivery log keeps of a receiver's answer: its content type and size, never its body. A webhook's URL
 * may point into the ranges DPC_OUTBOUND_ALLOW opens for the whole deployment (a warehouse's, a catalogue's):
 * keeping the body would let any account's admin read what a service there answers (attack finding A25).
 */
function answerSummary(headers: Record<string, string>, bytes: number): string {
  const type = headers['content-type']?.split(';')[0].trim().slice(0, 100);
  return `${bytes} bytes${type ? ` of ${type}` : ''}`;
}

interface DeliveryJob {
  deliveryId: string;
  /** Tries made when the job was queued: a job whose try another worker already recorded does nothing. */
  attempts: number;
  /** A manual redelivery: one try, no retries. */
  manual?: boolean;
}

/**
 * Query parameter names a receiver's key hides in that the credential detector (core/credentials.ts) does
 * not count as credentials everywhere: Azure Functions' `?code=`.
 */
const WEBHOOK_KEY_PARAMETERS = new Set(['code']);

/** A webhook's URL as events show it: scheme, host and port only (its path and query may hold the receiver's key). */
export function webhookOrigin(url: string): string {
  return URL.canParse(url) ? new URL(url).origin : '';
}

/** A project given to a webhook must be one of the account's: 422 naming `body.projectId` otherwise. */
async function checkProject(db: Executor, accountId: string, projectId: string | null | undefined): Promise<void> {
  if (projectId === undefined || projectId === null) return;
  try {
    await requireProject(db, accountId, projectId);
  } catch (error) {
    if (!(error instanceof ProblemError) || error.status !== 404) throw error;
    throw unprocessable(`Project ${projectId} does not exist in this account.`, [
      'body.projectId: is not a project of this account',
    ]);
  }
}

const sealContext = (webhookId: string) => `webhooks:${webhookId}:signing-secret`;

/** A new signing secret: 32 random bytes, base64, prefixed so that it is recognisable in a receiver's settings. */
function newSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

/**
 * The signature a receiver checks: HMAC-SHA256, keyed with the signing secret, of `<timestamp>.<body>`,
 * where timestamp is the X-Signature-Timestamp header (Unix seconds) and body the exact bytes received;
 * sent as `X-Signature: sha256=<hex>`. See docs/webhooks.md.
 */
export function signature(secret: string, timestamp: number, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
}

/** What a webhook sends for an event: the same document the event stream's `data:` line carries. */
export function deliveryBody(event: StoredEvent): string {
  return JSON.stringify({
    id: event.id,
    type: event.type,
    occurredAt: event.occurredAt,
    projectId: event.projectId,
    subject: event.subject,
    data: event.data,
  });
}

/** How a webhook is shown (never its secret). */
function toWebhook(row: WebhookRow): Webhook {
  return {
    webhookId: row.id,
    url: row.url,
    ...(row.description !== null && { description: row.description }),
    eventTypes: JSON.parse(row.eventTypes) as string[],
    ...(row.projectId !== null && { projectId: row.projectId }),
    enabled: row.enabled === 1,
    ...(row.disabledReason !== null && { disabledReason: row.disabledReason }),
    consecutiveFailures: row.consecutiveFailures,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/** How a delivery is shown. */
function toDelivery(row: DeliveryRow): WebhookDelivery {
  return {
    deliveryId: row.id,
    eventId: Number(row.eventId),
    eventType: row.eventType,
    status: row.status,
    attempts: row.attempts,
    ...(row.nextAttemptAt !== null && { nextAttemptAt: row.nextAttemptAt }),
    ...(row.lastAttemptAt !== null && { lastAttemptAt: row.lastAttemptAt }),
    ...(row.lastStatusCode !== null && { lastStatusCode: row.lastStatusCode }),
    ...(row.lastResponse !== null && { lastResponse: row.lastResponse }),
    ...(row.lastError !== null && { lastError: row.lastError }),
    createdAt: row.createdAt,
  };
}

/** Webhook `webhookId` of the account, or a 404. */
async function requireWebhook(db: Executor, accountId: string, webhookId: string): Promise<WebhookRow> {
  const row = await findWebhook(db, accountId, webhookId);
  if (!row) throw notFound(`Webhook ${webhookId} does not exist in this account.`);
  return row;
}

/** Delivery `deliveryId` of the webhook, or a 404. */
async function requireDelivery(db: Executor, webhookId: string, deliveryId: string): Promise<DeliveryRow> {
  const row = await findDelivery(db, webhookId, deliveryId);
  if (!row) throw notFound(`Delivery ${deliveryId} does not exist for this webhook.`);
  return row;
}

/**
 * Webhooks: their rules, the fan-out of the outbox into deliveries, and the deliveries themselves.
 *
 * Fan-out: each process, woken by new events (or its poll), reads every enabled webhook's events past its
 * cursor and, in one transaction, moves the cursor (compare-and-set: one process wins) and makes one
 * delivery per matching event (unique per webhook and event) with a durable job to send it. Sending: the
 * job signs and POSTs the body through the outbound client (address rules, deadline); a 2xx answer ends
 * it, anything else is recorded and retried after the next wait of DPC_WEBHOOK_RETRY_SECONDS, then
 * FAILED. A webhook whose deliveries failed every try DPC_WEBHOOK_DISABLE_AFTER times in a row is
 * disabled. A process that dies while sending leaves the job to be taken over when its lease runs out: the
 * receiver may then get the same event twice, with the same X-Event-Id (at least once, never lost).
 */
export class WebhookService {
  private readonly outbound: OutboundClient;
  private fanning: Promise<void> | undefined;
  private fanAgain: Set<string> | 'all' | undefined;
  /**
   * The accounts with an enabled webhook, as this process last read them (at each poll, which reads every
   * enabled webhook) and as its own writes made them: a commit's wake-up for any other account reads
   * nothing. Undefined until the first poll: every wake-up reads.
   */
  private withWebhooks: Set<string> | undefined;
  /** Accounts this process gave a webhook (or enabled one of) since the last poll began reading: kept by its answer. */
  private webhooksGiven = new Set<string>();
  /** Accounts whose committed events were held back at the last fan-out, read again in HELD_BACK_MS. */
  private heldBack: NodeJS.Timeout | undefined;

  constructor(private readonly app: FastifyInstance) {
    this.outbound = new OutboundClient(outboundSettings(app.config));
  }

  /** Registers the delivery job and follows the outbox (only in processes that run background work). */
  start(): void {
    this.app.jobs.register(DELIVERY_JOB, (payload) => this.deliver(payload as DeliveryJob), {
      concurrency: this.app.config.webhookConcurrency,
    });
    let unsubscribe: (() => void) | undefined;
    this.app.addHook('onReady', async () => {
      unsubscribe = this.app.outboxWakeups.subscribe((accounts) => this.wake(accounts));
    });
    this.app.addHook('onClose', async () => {
      unsubscribe?.();
      clearTimeout(this.heldBack);
      this.heldBack = undefined;
      await this.fanning;
    });
    // The wake-up across processes on SQLite; on PostgreSQL (NOTIFY) a safety net only.
    const pollMs = this.app.config.eventsPollMs * (this.app.store.dialect === 'postgres' ? 10 : 1);
    runPeriodically(this.app, 'webhook fan-out', pollMs, async () => {
      this.wake('all');
      await this.fanning;
    });
  }

  async checkUrl(url: string): Promise<void> {
    const parsed = URL.canParse(url) ? new URL(url) : undefined;
    if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) {
      throw unprocessable('A webhook URL must be an http or https URL.', ['body.url: must be an http(s) URL']);
    }
    if (parsed.username || parsed.password) {
      throw unprocessable('A webhook URL must not hold credentials.', ['body.url: must not hold a user or password']);
    }
    // Its query is looked at as other stored URLs are (docs/credentials.md): the URL is shown to admins and
    // kept in plain text; a receiver authenticates deliveries by their signature instead.
    const found =
      [...parsed.searchParams]
        .map(([name, value]) =>
          WEBHOOK_KEY_PARAMETERS.has(name.toLowerCase()) && value !== ''
            ? `"${name}" names a credential`
            : credentialInNamed(name, value),
        )
        .find((reason) => reason !== undefined) ?? credentialIn(url);
    if (found) {
      throw unprocessable('A webhook URL must not hold credentials: the receiver checks the signature instead.', [
        `body.url: holds a credential (${found})`,
      ]);
    }
    try {
      await this.outbound.checkHost(parsed);
    } catch (error) {
      if (error instanceof OutboundError && error.failure === 'refused') {
        throw unprocessable(error.message, ['body.url: the address may not be reached (DPC_OUTBOUND_ALLOW)']);
      }
      // A name that does not resolve now may later: deliveries check every time.
    }
  }

  /**
   * Creates a webhook (its URL checked: 422) with a new signing secret, shown in the answer this once.
   * `named` is told the new webhook's id in the creating transaction.
   */
  async create(
    accountId: string,
    clientId: string,
    body: CreateWebhookRequest,
    named?: (webhookId: string) => void,
  ): Promise<Webhook & { signingSecret: string }> {
    await this.checkUrl(body.url);
    // Before the write (a wake-up between its commit and a later line would pass the account over) and after it
    // (a poll that began reading before the commit would not find it, and replaces what it knew when it ends).
    this.webhooksGivenTo(accountId);
    const secret = newSigningSecret();
    const row = await this.app.store.db.transaction().execute(async (trx) => {
      await checkProject(trx, accountId, body.projectId);
      const created = await insertWebhook(trx, {
        accountId,
        url: body.url,
        description: body.description ?? null,
        eventTypes: JSON.stringify(body.eventTypes ?? []),
        projectId: body.projectId ?? null,
        enabled: body.enabled === false ? 0 : 1,
        disabledReason: null,
        sealedSecret: 'sealed below',
        // Events from now on: the account's last event is already behind it.
        cursor: await lastEventId(trx, accountId),
        consecutiveFailures: 0,
        createdBy: clientId,
      });
      const sealedSecret = this.app.secretBox.seal(secret, sealContext(created.id));
      await updateWebhookRow(trx, created.id, { sealedSecret });
      named?.(created.id);
      return { ...created, sealedSecret };
    });
    this.webhooksGivenTo(accountId);
    return { ...toWebhook(row), signingSecret: secret };
  }

  /** A page of the account's webhooks, oldest first. */
  async list(accountId: string, query: PageQuery) {
    const { rows, total } = await listWebhookRows(this.app.store.db, accountId, query);
    return pageOf(query, rows.map(toWebhook), total);
  }

  /** Webhook `webhookId` of the account, or a 404. */
  async read(accountId: string, webhookId: string): Promise<Webhook> {
    return toWebhook(await requireWebhook(this.app.store.db, accountId, webhookId));
  }

  /** A page of the deliveries of the account's webhook `webhookId` (a 404 when there is none), newest event first. */
  async deliveries(accountId: string, webhookId: string, query: PageQuery & { status?: string }) {
    await requireWebhook(this.app.store.db, accountId, webhookId);
    const { rows, total } = await listDeliveryRows(this.app.store.db, webhookId, query);
    return pageOf(query, rows.map(toDelivery), total);
  }

  /** Deletes finished deliveries older than the events' retention; how many. */
  prune(): Promise<number> {
    const retentionMs = this.app.config.eventsRetentionDays * 24 * 3_600_000;
    return pruneDeliveries(this.app.store.db, new Date(Date.now() - retentionMs).toISOString());
  }

  /**
   * Changes the account's webhook (a 404 when there is none; a new URL checked: 422). Enabling it again
   * clears its failures and sends on the deliveries left pending while it was disabled.
   */
  async update(accountId: string, webhookId: string, body: UpdateWebhookRequest): Promise<Webhook> {
    if (body.url !== undefined) await this.checkUrl(body.url);
    if (body.enabled === true) this.webhooksGivenTo(accountId); // before the write and after it, as in create
    const updated = await this.app.store.db.transaction().execute(async (trx) => {
      const row = await requireWebhook(trx, accountId, webhookId);
      await checkProject(trx, accountId, body.projectId);
      const changes: Partial<WebhookRow> = {
        ...(body.url !== undefined && { url: body.url }),
        ...(body.description !== undefined && { description: body.description }),
        ...(body.eventTypes !== undefined && { eventTypes: JSON.stringify(body.eventTypes) }),
        ...(body.projectId !== undefined && { projectId: body.projectId }),
        ...(body.enabled !== undefined && { enabled: body.enabled ? 1 : 0, disabledReason: null }),
        ...(body.enabled === true && { consecutiveFailures: 0 }),
      };
      await updateWebhookRow(trx, webhookId, changes);
      // Deliveries left pending while it was disabled go on (the cursor resumes where it stopped too).
      if (body.enabled === true && row.enabled === 0) {
        for (const pending of await pendingDeliveries(trx, webhookId)) {
          await this.app.jobs.enqueue(
            trx,
            DELIVERY_JOB,
            { deliveryId: pending.id, attempts: pending.attempts } satisfies DeliveryJob,
            { group: webhookId },
          );
        }
      }
      return toWebhook({ ...row, ...changes });
    });
    if (body.enabled === true) this.webhooksGivenTo(accountId);
    return updated;
  }

  /** Deletes the account's webhook and its delivery log; a 404 when there is none. */
  async delete(accountId: string, webhookId: string): Promise<void> {
    if (!(await this.app.store.db.transaction().execute((trx) => deleteWebhookRow(trx, accountId, webhookId)))) {
      throw notFound(`Webhook ${webhookId} does not exist in this account.`);
    }
  }

  /** Replaces the signing secret of the account's webhook (a 404 when there is none); the new one. */
  async rotateSecret(accountId: string, webhookId: string): Promise<string> {
    const secret = newSigningSecret();
    await this.app.store.db.transaction().execute(async (trx) => {
      await requireWebhook(trx, accountId, webhookId);
      await updateWebhookRow(trx, webhookId, { sealedSecret: this.app.secretBox.seal(secret, sealContext(webhookId)) });
    });
    return secret;
  }

  /**
   * Tries a finished delivery once more, soon: a 404 when the webhook or delivery is missing, a 409 when it
   * is pending or the webhook is disabled.
   */
  async redeliver(accountId: string, webhookId: string, deliveryId: string): Promise<WebhookDelivery> {
    return this.app.store.db.transaction().execute(async (trx) => {
      const webhook = await requireWebhook(trx, accountId, webhookId);
      const delivery = await requireDelivery(trx, webhookId, deliveryId);
      // A disabled webhook sends nothing: the try would wait, unannounced, for it to be enabled.
      if (webhook.enabled !== 1)
        throw conflict('The webhook is disabled: enable it first (PATCH enabled: true), then redeliver.');
      if (!(await reopenDelivery(trx, deliveryId))) throw conflict('The delivery is still pending: it will be tried again.');
      await this.app.jobs.enqueue(
        trx,
        DELIVERY_JOB,
        { deliveryId, attempts: delivery.attempts, manual: true } satisfies DeliveryJob,
        { group: webhookId },
      );
      return toDelivery({ ...delivery, status: 'PENDING', nextAttemptAt: now() });
    });
  }

  /** The account has (or may have) an enabled webhook now: its wake-ups fan out. */
  private webhooksGivenTo(accountId: string): void {
    this.withWebhooks?.add(accountId);
    this.webhooksGiven.add(accountId);
  }

  /** Fans out the accounts' new events (coalescing wake-ups that arrive while a fan-out runs). */
  wake(woken: string[] | 'all'): void {
    const known = this.withWebhooks;
    const accounts = woken === 'all' || !known ? woken : woken.filter((account) => known.has(account));
    if (accounts.length === 0) return;
    if (this.fanning) {
      if (accounts === 'all' || this.fanAgain === 'all') this.fanAgain = 'all';
      else {
        const again: Set<string> = this.fanAgain ?? new Set<string>();
        for (const account of accounts) again.add(account);
        this.fanAgain = again;
      }
      return;
    }
    this.fanning = this.fanOut(accounts)
      .catch((error) => this.app.log.error({ err: error }, 'webhook fan-out failed'))
      .finally(() => {
        this.fanning = undefined;
        const again = this.fanAgain;
        this.fanAgain = undefined;
        if (again) this.wake(again === 'all' ? 'all' : [...again]);
      });
  }

  /**
   * Makes the deliveries of every enabled webhook (of `accounts`) up to its account's last event. Accounts
   * whose committed events are held back behind an older transaction are fanned out again in HELD_BACK_MS.
   */
  async fanOut(accounts: string[] | 'all'): Promise<void> {
    const db = this.app.store.db;
    const heldBack = new Set<string>();
    const given = accounts === 'all' ? (this.webhooksGiven = new Set()) : undefined;
    const webhooks = await enabledWebhooks(db, accounts);
    if (given) this.withWebhooks = new Set([...webhooks.map((webhook) => webhook.accountId), ...given]);
    for (const webhook of webhooks) {
      let cursor = Number(webhook.cursor);
      const types = JSON.parse(webhook.eventTypes) as string[];
      const filter = { types, projectId: webhook.projectId ?? undefined };
      for (;;) {
        // Only final ids are read (core/outbox.ts): none below the cursor can appear later. Events past the
        // cursor that retention removed are simply not there.
        const { events, heldBack: held } = await readEvents(db, webhook.accountId, cursor, FAN_OUT_BATCH);
        if (held) heldBack.add(webhook.accountId);
        if (events.length === 0) break;
        const to = events.at(-1)!.id;
        let enqueued = false;
        const moved = await db.transaction().execute(async (trx) => {
          if (!(await advanceCursor(trx, webhook.id, cursor, to))) return false;
          for (const event of events) {
            if (!matches(filter, event)) continue;
            const deliveryId = await insertDelivery(trx, {
              webhookId: webhook.id,
              accountId: webhook.accountId,
              eventId: event.id,
              eventType: event.type,
              body: deliveryBody(event),
            });
            await this.app.jobs.enqueue(trx, DELIVERY_JOB, { deliveryId, attempts: 0 } satisfies DeliveryJob, {
              group: webhook.id,
            });
            enqueued = true;
          }
          return true;
        });
        // The queue was poked at the enqueue, before the commit made the job visible: again now.
        if (moved && enqueued) this.app.jobs.poke();
        if (!moved) break; // another process fans this webhook out
        cursor = to;
        if (events.length < FAN_OUT_BATCH) break;
      }
    }
    if (heldBack.size > 0 && !this.heldBack) {
      this.heldBack = setTimeout(() => {
        this.heldBack = undefined;
        this.wake([...heldBack]);
      }, HELD_BACK_MS);
      this.heldBack.unref();
    }
  }

  /** One try of a delivery (the job's handler). */
  async deliver(job: DeliveryJob): Promise<void> {
    const db = this.app.store.db;
    const found = await deliveryWithWebhook(db, job.deliveryId);
    if (!found) return; // the webhook was deleted
    const { delivery, webhook } = found;
    if (delivery.status !== 'PENDING' || delivery.attempts !== job.attempts) return; // recorded by another worker
    if (webhook.enabled !== 1) return; // resumed when it is enabled again
    const secret = this.app.secretBox.open(webhook.sealedSecret, sealContext(webhook.id));
    const timestamp = Math.floor(Date.now() / 1000);
    let statusCode: number | null = null;
    let response: string | null = null;
    let error: string | null = null;
    try {
      const answer = await this.outbound.send({
        method: 'POST',
        url: new URL(webhook.url),
        headers: {
          'content-type': 'application/json',
          'user-agent': 'platform-api-webhooks/1',
          'x-event-id': String(delivery.eventId),
          'x-event-type': delivery.eventType,
          'x-delivery-id': delivery.id,
          'x-signature-timestamp': String(timestamp),
          'x-signature': signature(secret, timestamp, delivery.body),
        },
        body: delivery.body,
      });
      statusCode = answer.status;
      response = answerSummary(answer.headers, answer.body.length);
    } catch (failure) {
      if (!(failure instanceof OutboundError)) throw failure;
      error = failure.message;
    }
    const succeeded = statusCode !== null && statusCode >= 200 && statusCode < 300;
    const tries = delivery.attempts + 1;
    const schedule = this.app.config.webhookRetrySeconds;
    // A manual redelivery is one try; otherwise one try and then one per wait of the schedule.
    const waitSeconds = job.manual || succeeded ? undefined : schedule[tries - 1];
    const nextAttemptAt = waitSeconds === undefined ? null : new Date(Date.now() + waitSeconds * 1000).toISOString();
    const status = succeeded ? 'SUCCEEDED' : nextAttemptAt ? 'PENDING' : 'FAILED';
    await db.transaction().execute(async (trx) => {
      const recorded = await recordAttempt(trx, delivery.id, delivery.attempts, {
        status,
        nextAttemptAt,
        lastStatusCode: statusCode,
        lastResponse: response,
        lastError: error ?? (succeeded ? null : `The receiver answered ${statusCode}.`),
      });
      if (!recorded) return;
      if (nextAttemptAt) {
        await this.app.jobs.enqueue(trx, DELIVERY_JOB, { deliveryId: delivery.id, attempts: tries } satisfies DeliveryJob, {
          runAt: new Date(nextAttemptAt),
          group: webhook.id,
        });
      } else if (!job.manual || succeeded) {
        await this.settleFailures(trx, webhook, succeeded);
      }
    });
  }

  /** Counts a delivery that ended: a success clears the failures, a failure may disable the webhook. */
  private async settleFailures(trx: Executor, webhook: WebhookRow, succeeded: boolean): Promise<void> {
    if (succeeded) {
      await clearFailures(trx, webhook.id);
      return;
    }
    const row = await countFailure(trx, webhook.id);
    if (!row || row.enabled !== 1 || row.consecutiveFailures < this.app.config.webhookDisableAfter) return;
    const reason = `Disabled after ${row.consecutiveFailures} deliveries in a row failed every try.`;
    await updateWebhookRow(trx, webhook.id, { enabled: 0, disabledReason: reason });
    await emit(trx, {
      accountId: webhook.accountId,
      type: 'webhook.disabled',
      projectId: webhook.projectId,
      subject: `webhooks/${webhook.id}`,
      // Every role reads events: the webhook by id and its URL's origin only, never its path or query.
      data: { webhookId: webhook.id, origin: webhookOrigin(webhook.url), reason },
    });
  }
}
