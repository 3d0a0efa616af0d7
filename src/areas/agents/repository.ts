/**
 * The agents' SQL: rows of `agents` and nothing else. The rules (placement, names, credentials, presence)
 * are the service's (service.ts).
 */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { Expression, ExpressionBuilder, Selectable } from 'kysely';
import type { Database } from '../../core/db/schema.ts';
import type { Executor } from '../../core/db/database.ts';
import { now, sql } from '../../core/db/database.ts';
import { countOf, offsetOf } from '../../core/paging.ts';
import type { AgentTable } from './tables.ts';
import type { AgentQuery } from './schemas.ts';

export type AgentRow = Selectable<AgentTable>;

/** What a new agent is made of; the rest of its row starts empty (no credentials, never in contact). */
export type NewAgent = Pick<AgentRow, 'id' | 'accountId' | 'name' | 'description' | 'agentType' | 'cloudProvider' | 'deployment'>;

/** What an update may change. */
export type AgentChanges = Pick<AgentRow, 'name' | 'description' | 'agentType' | 'cloudProvider' | 'deployment' | 'pausedUntil'>;

/** Agent `agentId` of the account, if there is one. */
export function findAgent(db: Executor, accountId: string, agentId: string): Promise<AgentRow | undefined> {
  return db.selectFrom('agents').selectAll().where('id', '=', agentId).where('accountId', '=', accountId).executeTakeFirst();
}

/** The account's agent of `agentType` named `name`, if there is one. */
export function findAgentNamed(db: Executor, accountId: string, agentType: string, name: string) {
  return db
    .selectFrom('agents')
    .select('id')
    .where('accountId', '=', accountId)
    .where('agentType', '=', agentType)
    .where('name', '=', name)
    .executeTakeFirst();
}

/** Inserts a new agent: PENDING, without credentials, never in contact. A taken name is a unique violation. */
export async function insertAgent(db: Executor, agent: NewAgent): Promise<void> {
  await db
    .insertInto('agents')
    .values({
      ...agent,
      status: 'PENDING',
      pausedUntil: null,
      clientId: null,
      secretHash: null,
      sealedSecret: null,
      certificatePem: null,
      lastContactAt: null,
      createdAt: now(),
    })
    .execute();
}

/** A page of the account's agents, filtered by type, name (a case-insensitive part) and status, by name. */
export async function listAgents(db: Executor, accountId: string, query: AgentQuery) {
  const at = now();
  let filtered = db.selectFrom('agents').where('accountId', '=', accountId);
  if (query.type) filtered = filtered.where('agentType', '=', query.type);
  if (query.name) {
    const pattern = `%${query.name.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    filtered = filtered.where(sql<boolean>`lower(${sql.ref('name')}) like ${pattern} escape '\\'`);
  }
  if (query.status === 'PAUSED') filtered = filtered.where('pausedUntil', '>', at);
  else if (query.status) {
    filtered = filtered
      .where('status', '=', query.status)
      .where((eb) => eb.or([eb('pausedUntil', 'is', null), eb('pausedUntil', '<=', at)]));
  }
  const [rows, total] = await Promise.all([
    filtered.selectAll().orderBy('name').orderBy('id').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(filtered),
  ]);
  return { rows, total };
}

/**
 * Writes the changes of an update, one version on (as every UPDATE of an agent that changes what it answers).
 * A taken name is a unique violation. Where the request's If-Match check saw a version of this row, only that
 * version is changed (a 412 when another write came between: core/conditional.ts).
 */
export async function updateAgentRow(db: Executor, agentId: string, changes: AgentChanges): Promise<void> {
  const expected = expectedRowVersion('agents', agentId);
  let update = db
    .updateTable('agents')
    .set({ ...changes, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', agentId);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const result = await update.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('agents', agentId, result.numUpdatedRows > 0n);
}

/** Deletes the agent; as updateAgentRow for If-Match. */
export async function deleteAgentRow(db: Executor, agentId: string): Promise<void> {
  const expected = expectedRowVersion('agents', agentId);
  let deletion = db.deleteFrom('agents').where('id', '=', agentId);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('agents', agentId, result.numDeletedRows > 0n);
}

/** Sets the agent's client credentials (`onlyIfNone`: only where it has none); whether a row changed. */
export async function setAgentClient(
  db: Executor,
  agentId: string,
  client: Pick<AgentRow, 'clientId' | 'secretHash' | 'sealedSecret'>,
  onlyIfNone: boolean,
): Promise<boolean> {
  let update = db
    .updateTable('agents')
    .set({ ...client, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', agentId);
  if (onlyIfNone) update = update.where('clientId', 'is', null);
  return (await update.executeTakeFirst()).numUpdatedRows > 0n;
}

/** Which of `agentIds` have been in contact (a poll or heartbeat) at or after `since`. */
export async function agentsInContactSince(db: Executor, agentIds: readonly string[], since: string): Promise<Set<string>> {
  if (agentIds.length === 0) return new Set();
  const rows = await db
    .selectFrom('agents')
    .select('id')
    .where('id', 'in', [...new Set(agentIds)])
    .where('lastContactAt', '>=', since)
    .execute();
  return new Set(rows.map((row) => row.id));
}

/** The agent whose current credentials are `clientId` (a token of replaced credentials names none). */
export function findAgentOfClient(db: Executor, accountId: string, agentId: string, clientId: string) {
  return db
    .selectFrom('agents')
    .select('id')
    .where('id', '=', agentId)
    .where('accountId', '=', accountId)
    .where('clientId', '=', clientId)
    .executeTakeFirst();
}

/**
 * Records contact now, RUNNING unless paused (or already so); whether its presence was announced, if it exists.
 * An agent answers its lastContactAt, so every contact is a version on.
 */
export function recordContact(db: Executor, agentId: string) {
  return db
    .updateTable('agents')
    .set((eb) => ({
      lastContactAt: now(),
      status: eb.case().when('status', 'in', ['PENDING', 'STOPPED']).then('RUNNING').else(eb.ref('status')).end(),
      rowVersion: eb('rowVersion', '+', 1),
    }))
    .where('id', '=', agentId)
    .returning('presenceAnnounced')
    .executeTakeFirst();
}

/**
 * Marks the agent's presence announced, once: the agent when this call did it, else undefined. (Its version
 * stays: an agent does not answer whether its presence was announced; so below.)
 */
export function markPresenceAnnounced(db: Executor, agentId: string) {
  return db
    .updateTable('agents')
    .set({ presenceAnnounced: 1 })
    .where('id', '=', agentId)
    .where('presenceAnnounced', '=', 0)
    .returning(['accountId', 'name'])
    .executeTakeFirst();
}

/** Unmarks the agents announced connected without contact since `cutoff` (or signed off); those unmarked. */
export function unmarkAbsentAgents(db: Executor, cutoff: string) {
  return db
    .updateTable('agents')
    .set({ presenceAnnounced: 0 })
    .where('presenceAnnounced', '=', 1)
    .where((eb) => eb.or([eb('lastContactAt', 'is', null), eb('lastContactAt', '<', cutoff)]))
    .returning(['id', 'accountId', 'name'])
    .execute();
}

/** The agent's status and pause, or undefined once it is deleted. */
export function agentState(db: Executor, agentId: string) {
  return db.selectFrom('agents').select(['status', 'pausedUntil']).where('id', '=', agentId).executeTakeFirst();
}

export async function setAgentCertificate(db: Executor, agentId: string, certificatePem: string): Promise<void> {
  await db
    .updateTable('agents')
    .set({ certificatePem, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', agentId)
    .execute();
}

/** Sign-off: STOPPED, and not connected until the agent's next contact. */
export async function signOffAgent(db: Executor, agentId: string): Promise<void> {
  await db
    .updateTable('agents')
    .set({ status: 'STOPPED', lastContactAt: null, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', agentId)
    .execute();
}

/**
 * For lists of other areas that show an agent's name beside its id: a scalar subquery, the name of the agent
 * `agentId` refers to when it is one of account `accountId`'s (else null).
 */
export function agentNameWhere(
  eb: ExpressionBuilder<Database, any>,
  agentId: Expression<string | null>,
  accountId: Expression<string | null>,
) {
  return eb
    .selectFrom('agents')
    .select('agents.name')
    .where((inner) =>
      inner.and([inner(inner.ref('agents.id'), '=', agentId), inner(inner.ref('agents.accountId'), '=', accountId)]),
    )
    .$asScalar();
}

/** The account's agents among `agentIds`, by id, with their name and type (an id of a deleted agent is absent). */
export async function agentsById(
  db: Executor,
  accountId: string,
  agentIds: readonly string[],
): Promise<Map<string, { name: string; agentType: string }>> {
  if (agentIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('agents')
    .select(['id', 'name', 'agentType'])
    .where('accountId', '=', accountId)
    .where('id', 'in', [...new Set(agentIds)])
    .execute();
  return new Map(rows.map((row) => [row.id, { name: row.name, agentType: row.agentType }]));
}
