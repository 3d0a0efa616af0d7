/**
 * The webhooks' SQL: rows of `webhooks` and `webhookDeliveries` and nothing else. The rules (URLs, secrets,
 * 404s and 409s, fan-out and tries, how a webhook is shown) are the service's (service.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import { now, type Executor } from '../../core/db/database.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { WebhookDeliveryTable, WebhookTable } from './tables.ts';

export type WebhookRow = Selectable<WebhookTable>;
export type DeliveryRow = Selectable<WebhookDeliveryTable>;

/** Inserts a webhook with a new id, created and updated now; the row as stored. */
export async function insertWebhook(
  trx: Executor,
  row: Omit<WebhookRow, 'id' | 'createdAt' | 'updatedAt' | 'rowVersion'>,
): Promise<WebhookRow> {
  const at = now();
  const full = { ...row, id: randomUUID(), createdAt: at, updatedAt: at, rowVersion: 0 };
  await trx.insertInto('webhooks').values(full).execute();
  return full;
}

/** Webhook `webhookId` of the account, if there is one. */
export function findWebhook(db: Executor, accountId: string, webhookId: string): Promise<WebhookRow | undefined> {
  return db.selectFrom('webhooks').selectAll().where('id', '=', webhookId).where('accountId', '=', accountId).executeTakeFirst();
}

/** A page of the account's webhooks, oldest first, and how many it has. */
export async function listWebhookRows(db: Executor, accountId: string, query: PageQuery) {
  const base = db.selectFrom('webhooks').where('accountId', '=', accountId);
  const [rows, total] = await Promise.all([
    base.selectAll().orderBy('createdAt').orderBy('id').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(base),
  ]);
  return { rows, total };
}

/**
 * Writes an update's changes to webhook `id`, updated now, one version on. Where the request's If-Match check
 * saw a version of this row, only that version is changed (a 412 when another write came between).
 */
export async function updateWebhookRow(trx: Executor, id: string, changes: Partial<WebhookRow>): Promise<void> {
  const expected = expectedRowVersion('webhooks', id);
  let update = trx
    .updateTable('webhooks')
    .set({ ...changes, updatedAt: now(), rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', id);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('webhooks', id, result.numUpdatedRows > 0n);
}

/** Deletes the account's webhook (its deliveries cascade); whether there was one. As updateWebhookRow for If-Match. */
export async function deleteWebhookRow(trx: Executor, accountId: string, id: string): Promise<boolean> {
  const expected = expectedRowVersion('webhooks', id);
  let deletion = trx.deleteFrom('webhooks').where('id', '=', id).where('accountId', '=', accountId);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('webhooks', id, result.numDeletedRows > 0n);
  return result.numDeletedRows > 0n;
}

/** Enabled webhooks (of the accounts given, or all) whose deliveries may be behind the account's events. */
export function enabledWebhooks(db: Executor, accountIds: string[] | 'all') {
  let query = db.selectFrom('webhooks').selectAll().where('enabled', '=', 1);
  if (accountIds !== 'all') query = query.where('accountId', 'in', accountIds);
  return query.execute();
}

/**
 * Moves the webhook's cursor from `from` to `to`; false when another process moved it first (or it was disabled).
 * Its version stays: a webhook does not answer its cursor, and no write through the API sets it.
 */
export async function advanceCursor(trx: Executor, id: string, from: number, to: number): Promise<boolean> {
  const result = await trx
    .updateTable('webhooks')
    .set({ cursor: to })
    .where('id', '=', id)
    .where('cursor', '=', from)
    .where('enabled', '=', 1)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** Inserts a PENDING delivery due now, never tried; its id. One per webhook and event (unique). */
export async function insertDelivery(
  trx: Executor,
  delivery: Pick<DeliveryRow, 'webhookId' | 'accountId' | 'eventId' | 'eventType' | 'body'>,
): Promise<string> {
  const id = randomUUID();
  const at = now();
  await trx
    .insertInto('webhookDeliveries')
    .values({
      ...delivery,
      id,
      status: 'PENDING',
      attempts: 0,
      nextAttemptAt: at,
      lastAttemptAt: null,
      lastStatusCode: null,
      lastResponse: null,
      lastError: null,
      createdAt: at,
    })
    .execute();
  return id;
}

/** A delivery and its webhook, or undefined when either is gone. */
export async function deliveryWithWebhook(db: Executor, deliveryId: string) {
  const delivery = await db.selectFrom('webhookDeliveries').selectAll().where('id', '=', deliveryId).executeTakeFirst();
  if (!delivery) return undefined;
  const webhook = await db.selectFrom('webhooks').selectAll().where('id', '=', delivery.webhookId).executeTakeFirst();
  return webhook && { delivery, webhook };
}

/** Records a try's outcome if the delivery is still at `attempts` tries (another worker did not record this try). */
export async function recordAttempt(
  trx: Executor,
  id: string,
  attempts: number,
  outcome: Pick<DeliveryRow, 'status' | 'nextAttemptAt' | 'lastStatusCode' | 'lastResponse' | 'lastError'>,
): Promise<boolean> {
  const result = await trx
    .updateTable('webhookDeliveries')
    .set({ ...outcome, attempts: attempts + 1, lastAttemptAt: now() })
    .where('id', '=', id)
    .where('attempts', '=', attempts)
    .where('status', '=', 'PENDING')
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** A page of the webhook's deliveries (of `status` when given), newest event first, and how many there are. */
export async function listDeliveryRows(db: Executor, webhookId: string, query: PageQuery & { status?: string }) {
  let base = db.selectFrom('webhookDeliveries').where('webhookId', '=', webhookId);
  if (query.status) base = base.where('status', '=', query.status);
  const [rows, total] = await Promise.all([
    base.selectAll().orderBy('eventId', 'desc').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(base),
  ]);
  return { rows, total };
}

/** Delivery `deliveryId` of the webhook, if there is one. */
export function findDelivery(db: Executor, webhookId: string, deliveryId: string): Promise<DeliveryRow | undefined> {
  return db
    .selectFrom('webhookDeliveries')
    .selectAll()
    .where('id', '=', deliveryId)
    .where('webhookId', '=', webhookId)
    .executeTakeFirst();
}

/** Makes a finished delivery PENDING again (a manual redelivery); false when it is pending already. */
export async function reopenDelivery(trx: Executor, id: string): Promise<boolean> {
  const result = await trx
    .updateTable('webhookDeliveries')
    .set({ status: 'PENDING', nextAttemptAt: now() })
    .where('id', '=', id)
    .where('status', '<>', 'PENDING')
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/** The webhook's PENDING deliveries: ids and tries made. */
export function pendingDeliveries(db: Executor, webhookId: string) {
  return db
    .selectFrom('webhookDeliveries')
    .select(['id', 'attempts'])
    .where('webhookId', '=', webhookId)
    .where('status', '=', 'PENDING')
    .execute();
}

/** Clears the webhook's count of deliveries in a row that failed (a version on: a webhook answers it), if not clear. */
export async function clearFailures(trx: Executor, id: string): Promise<void> {
  await trx
    .updateTable('webhooks')
    .set({ consecutiveFailures: 0, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', id)
    .where('consecutiveFailures', '<>', 0)
    .execute();
}

/** Counts one more delivery in a row that failed; the new count and whether the webhook is enabled (undefined when gone). */
export function countFailure(trx: Executor, id: string) {
  return trx
    .updateTable('webhooks')
    .set((eb) => ({ consecutiveFailures: eb('consecutiveFailures', '+', 1), rowVersion: eb('rowVersion', '+', 1) }))
    .where('id', '=', id)
    .returning(['consecutiveFailures', 'enabled'])
    .executeTakeFirst();
}

/** Deletes finished deliveries made before `before`; how many. */
export async function pruneDeliveries(db: Executor, before: string): Promise<number> {
  const result = await db
    .deleteFrom('webhookDeliveries')
    .where('createdAt', '<', before)
    .where('status', '<>', 'PENDING')
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
