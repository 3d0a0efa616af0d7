/**
 * Table types, as the code sees them (camelCase; the CamelCasePlugin maps them to snake_case columns).
 * Booleans are stored as 0/1 integers and times as ISO 8601 text so that one set of migrations
 * serves SQLite and PostgreSQL alike. Each area declares its own tables beside its code and adds them to
 * Database (below).
 */
import type { Generated } from 'kysely';

export interface AccountTable {
  id: string;
  name: string;
  createdAt: string;
}

export interface ApiClientTable {
  id: string;
  accountId: string;
  name: string;
  role: string;
  secretHash: string;
  createdAt: string;
  /** Set when the client is revoked: it gets no token, and its tokens stop working. */
  revokedAt: string | null;
}

export interface SigningKeyTable {
  kid: string;
  privateJwk: string;
  publicJwk: string;
  createdAt: string;
  /** Set when a newer key takes over signing; the key still verifies until its last token expires. */
  retiredAt: string | null;
}

export interface AuditEventTable {
  id: Generated<number>;
  accountId: string;
  clientId: string;
  method: string;
  route: string;
  path: string;
  status: number;
  projectId: string | null;
  resourceIds: string;
  occurredAt: string;
}

export interface JobTable {
  id: string;
  type: string;
  payload: string;
  state: string;
  runAt: string;
  attempts: number;
  maxAttempts: number;
  lockedBy: string | null;
  lockedUntil: string | null;
  lastError: string | null;
  /** Jobs of one group run one at a time (core/jobs.ts). */
  groupKey: string | null;
  createdAt: string;
  finishedAt: string | null;
}

/** Each account's last outbox event id (core/outbox.ts). */
/** SQLite only: the last outbox event id handed out (one row). */
export interface OutboxCounterTable {
  id: number;
  lastId: number;
}

/** A change worth announcing, written in the transaction of the change (core/outbox.ts). */
export interface OutboxEventTable {
  accountId: string;
  /** Global, only growing; not contiguous (core/outbox.ts). */
  id: number;
  type: string;
  projectId: string | null;
  /** What the event is about: a path-like name of the resource (`pipeline-executions/<id>`). */
  subject: string;
  /** JSON object. */
  data: string;
  occurredAt: string;
}

/** A request sent with an Idempotency-Key, and its answer once there is one (core/idempotency.ts). */
export interface IdempotencyKeyTable {
  clientId: string;
  key: string;
  accountId: string;
  /** SHA-256 of the method, URL and body. */
  fingerprint: string;
  /** running or done. */
  state: string;
  status: number | null;
  /** JSON object of the answer's headers that are replayed. */
  headers: string | null;
  body: string | null;
  /** A running request's claim; past it, a retry takes the key over (the process answering it died). */
  lockedUntil: string | null;
  createdAt: string;
  expiresAt: string;
}

export interface CoreTables {
  accounts: AccountTable;
  apiClients: ApiClientTable;
  signingKeys: SigningKeyTable;
  auditEvents: AuditEventTable;
  jobs: JobTable;
  outboxCounter: OutboxCounterTable;
  outboxEvents: OutboxEventTable;
  idempotencyKeys: IdempotencyKeyTable;
}

/**
 * Every table of the store. Core declares its own here; each area adds its tables from its own tables.ts:
 *
 *     declare module '../../core/db/schema.ts' {
 *       interface Database extends ProjectTables {}
 *     }
 *
 * so that core knows no area and an area's tables live beside its code.
 */
export interface Database extends CoreTables {}
