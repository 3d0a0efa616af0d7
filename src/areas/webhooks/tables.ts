import type { Generated } from 'kysely';

export interface WebhookTable {
  id: string;
  accountId: string;
  url: string;
  description: string | null;
  /** JSON array of types or prefixes ending in `*`; empty: every type. */
  eventTypes: string;
  /** Only events of this project, when set. */
  projectId: string | null;
  enabled: number;
  /** Why the server disabled it (deliveries kept failing); null when a user did, or it is enabled. */
  disabledReason: string | null;
  /** The signing secret, sealed by the secret box. */
  sealedSecret: string;
  /** The last outbox event id deliveries were made for. */
  cursor: number;
  /** Deliveries in a row that failed every try; reset by a success. */
  consecutiveFailures: number;
  createdBy: string;
  createdAt: string;
  updatedAt: string;
  /** One more with every change through the API: what a write with If-Match compares (core/conditional.ts). */
  rowVersion: Generated<number>;
}

export interface WebhookDeliveryTable {
  id: string;
  webhookId: string;
  accountId: string;
  eventId: number;
  eventType: string;
  /** The JSON sent, the same at every try. */
  body: string;
  /** PENDING, SUCCEEDED or FAILED (every try failed). */
  status: string;
  attempts: number;
  nextAttemptAt: string | null;
  lastAttemptAt: string | null;
  lastStatusCode: number | null;
  /** The start of the receiver's last answer. */
  lastResponse: string | null;
  lastError: string | null;
  createdAt: string;
}

export interface WebhookTables {
  webhooks: WebhookTable;
  webhookDeliveries: WebhookDeliveryTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends WebhookTables {}
}
