import { emit } from '../../core/outbox.ts';
import { randomUUID, X509Certificate } from 'node:crypto';
import type { Expression, ExpressionBuilder, Selectable } from 'kysely';
import type { Database } from '../../core/db/schema.ts';
import type { Db, Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now, sql } from '../../core/db/database.ts';
import { conflict, notFound, unprocessable } from '../../core/problems.ts';
import { countOf, offsetOf } from '../../core/paging.ts';
import { hashSecret, newClientSecret } from '../../core/auth/secrets.ts';
import type { AgentDeletion } from './deletion.ts';
import type { SecretBox } from '../../core/secret-box.ts';
import type { AgentTable } from './tables.ts';
import {
  DEPLOYMENTS_OF,
  type Agent,
  type AgentQuery,
  type AgentStatus,
  type AgentSummary,
  type CreateAgentRequest,
  type UpdateAgentRequest,
} from './schemas.ts';

export type AgentRow = Selectable<AgentTable>;

/** Whether the agent was in contact (heartbeat or poll, on any server instance) within the window. */
export function isConnected(row: Pick<AgentRow, 'lastContactAt'>, windowSeconds: number, at = Date.now()): boolean {
  return row.lastContactAt !== null && Date.parse(row.lastContactAt) > at - windowSeconds * 1000;
}

export function isPaused(row: Pick<AgentRow, 'pausedUntil'>, at = Date.now()): boolean {
  return row.pausedUntil !== null && Date.parse(row.pausedUntil) > at;
}

function statusOf(row: AgentRow): AgentStatus {
  return isPaused(row) ? 'PAUSED' : (row.status as AgentStatus);
}

export function toSummary(row: AgentRow, windowSeconds: number): AgentSummary {
  return {
    agentId: row.id,
    agentStatus: statusOf(row),
    agentType: row.agentType as AgentSummary['agentType'],
    cloudProvider: row.cloudProvider as AgentSummary['cloudProvider'],
    connected: isConnected(row, windowSeconds),
    deployment: row.deployment as AgentSummary['deployment'],
    ...(row.description !== null && { description: row.description }),
    name: row.name,
    ...(row.pausedUntil !== null && { pausedUntil: row.pausedUntil }),
  };
}

export function toAgent(row: AgentRow, windowSeconds: number): Agent {
  const certificate = row.certificatePem ? new X509Certificate(row.certificatePem) : undefined;
  return {
    ...toSummary(row, windowSeconds),
    ...(row.clientId !== null && { clientId: row.clientId }),
    ...(certificate && {
      certificateFingerprint: certificate.fingerprint256,
      certificateNotAfter: new Date(certificate.validTo).toISOString(),
    }),
    ...(row.lastContactAt !== null && { lastContactAt: row.lastContactAt }),
    createdAt: row.createdAt,
  };
}

function checkPlacement(cloudProvider: string, deployment: string): void {
  if (!DEPLOYMENTS_OF[cloudProvider as keyof typeof DEPLOYMENTS_OF].includes(deployment)) {
    throw unprocessable(`Deployment ${deployment} does not run on ${cloudProvider}.`, [
      `body.deployment: must be one of ${DEPLOYMENTS_OF[cloudProvider as keyof typeof DEPLOYMENTS_OF].join(', ')} on ${cloudProvider}`,
    ]);
  }
}

const nameTaken = (name: string) => conflict(`An agent named "${name}" already exists in this account.`);

/** Agent `agentId` of the account, if there is one. */
export function findAgent(db: Executor, accountId: string, agentId: string): Promise<AgentRow | undefined> {
  return db.selectFrom('agents').selectAll().where('id', '=', agentId).where('accountId', '=', accountId).executeTakeFirst();
}

/** The agent `agentId` of the account, or a 404: another account's agent is answered as one that does not exist. */
export async function requireAgent(db: Executor, accountId: string, agentId: string): Promise<AgentRow> {
  const row = await findAgent(db, accountId, agentId);
  if (!row) throw notFound(`Agent ${agentId} does not exist.`);
  return row;
}

export async function createAgent(db: Executor, accountId: string, request: CreateAgentRequest): Promise<string> {
  checkPlacement(request.cloudProvider, request.deployment);
  const id = randomUUID();
  try {
    await db
      .insertInto('agents')
      .values({
        id,
        accountId,
        name: request.name,
        description: request.description ?? null,
        agentType: request.agentType,
        cloudProvider: request.cloudProvider,
        deployment: request.deployment,
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
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(request.name);
    throw error;
  }
  return id;
}

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

export async function updateAgent(
  db: Executor,
  accountId: string,
  agentId: string,
  request: UpdateAgentRequest,
): Promise<AgentRow> {
  const row = await requireAgent(db, accountId, agentId);
  const next: AgentRow = {
    ...row,
    ...(request.name !== undefined && { name: request.name }),
    ...(request.description !== undefined && { description: request.description }),
    ...(request.agentType !== undefined && { agentType: request.agentType }),
    ...(request.cloudProvider !== undefined && { cloudProvider: request.cloudProvider }),
    ...(request.deployment !== undefined && { deployment: request.deployment }),
    ...(request.pausedUntil !== undefined && {
      pausedUntil: request.pausedUntil === null ? null : new Date(request.pausedUntil).toISOString(),
    }),
  };
  checkPlacement(next.cloudProvider, next.deployment);
  try {
    await db
      .updateTable('agents')
      .set({
        name: next.name,
        description: next.description,
        agentType: next.agentType,
        cloudProvider: next.cloudProvider,
        deployment: next.deployment,
        pausedUntil: next.pausedUntil,
      })
      .where('id', '=', agentId)
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(next.name);
    throw error;
  }
  return next;
}

/** Removes the agent with its work, unless a check of another area refuses (app.agentDeletion). */
export async function deleteAgent(db: Executor, accountId: string, agentId: string, checks: AgentDeletion): Promise<void> {
  await requireAgent(db, accountId, agentId);
  await checks.check(db, agentId);
  await db.deleteFrom('agents').where('id', '=', agentId).execute();
}

/** What an agent's secret is sealed with: the agent and the client it belongs to, so it opens nowhere else. */
const sealContext = (agentId: string, clientId: string) => `agents:${agentId}:client:${clientId}`;

/**
 * New client credentials for the agent; the old ones (and every token they got) stop working at once,
 * because agent tokens are checked against the agent's current client id. The secret is kept as a hash
 * (what tokens are checked against) and sealed with the server's key (what `readAgentCredentials` answers),
 * both made before the transaction (hashing takes tens of milliseconds; a transaction holds the store).
 * With `onlyIfNone` the agent keeps credentials it already has (answered undefined then).
 */
async function issue(
  db: Db,
  box: SecretBox,
  accountId: string,
  agentId: string,
  onlyIfNone = false,
): Promise<{ clientId: string; clientSecret: string } | undefined> {
  const clientId = randomUUID();
  const clientSecret = newClientSecret();
  const secretHash = await hashSecret(clientSecret);
  const sealedSecret = box.seal(clientSecret, sealContext(agentId, clientId));
  const issued = await db.transaction().execute(async (trx) => {
    await requireAgent(trx, accountId, agentId);
    let update = trx.updateTable('agents').set({ clientId, secretHash, sealedSecret }).where('id', '=', agentId);
    if (onlyIfNone) update = update.where('clientId', 'is', null);
    return (await update.executeTakeFirst()).numUpdatedRows > 0n;
  });
  return issued ? { clientId, clientSecret } : undefined;
}

/** New credentials for the agent, replacing (and so revoking) any it has. */
export async function issueAgentCredentials(db: Db, box: SecretBox, accountId: string, agentId: string) {
  return (await issue(db, box, accountId, agentId)) as { clientId: string; clientSecret: string };
}

/**
 * The agent's current credentials, the same on every read until they are rotated (a read never rotates);
 * an agent without any gets its first. Credentials issued before secrets were sealed cannot be read back (409).
 */
export async function readAgentCredentials(db: Db, box: SecretBox, accountId: string, agentId: string) {
  const row = await requireAgent(db, accountId, agentId);
  if (row.clientId === null) {
    const issued = await issue(db, box, accountId, agentId, true);
    if (issued) return issued;
    // Another request issued them meanwhile: answer those.
    return readAgentCredentials(db, box, accountId, agentId);
  }
  if (row.sealedSecret === null) {
    throw conflict(
      "The agent's credentials were issued before they were kept sealed and cannot be read back; issue new ones (POST).",
    );
  }
  return { clientId: row.clientId, clientSecret: box.open(row.sealedSecret, sealContext(agentId, row.clientId)) };
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
 * Records contact: connected from now for the window, and RUNNING unless paused (or already so). The first
 * contact after being out of contact is announced (`agent.connected`), once across server processes.
 */
export async function touchAgent(db: Db, agentId: string): Promise<void> {
  const touched = await db
    .updateTable('agents')
    .set((eb) => ({
      lastContactAt: now(),
      status: eb.case().when('status', 'in', ['PENDING', 'STOPPED']).then('RUNNING').else(eb.ref('status')).end(),
    }))
    .where('id', '=', agentId)
    .returning('presenceAnnounced')
    .executeTakeFirst();
  if (!touched || touched.presenceAnnounced === 1) return;
  await db.transaction().execute(async (trx) => {
    const agent = await trx
      .updateTable('agents')
      .set({ presenceAnnounced: 1 })
      .where('id', '=', agentId)
      .where('presenceAnnounced', '=', 0)
      .returning(['accountId', 'name'])
      .executeTakeFirst();
    if (agent) await announcePresence(trx, { id: agentId, ...agent }, 'connected');
  });
}

async function announcePresence(
  trx: Executor,
  agent: { id: string; accountId: string; name: string },
  presence: 'connected' | 'disconnected',
): Promise<void> {
  await emit(trx, {
    accountId: agent.accountId,
    type: `agent.${presence}`,
    subject: `agents/${agent.id}`,
    data: { agentId: agent.id, name: agent.name },
  });
}

/**
 * Announces `agent.disconnected` for agents announced connected whose last contact is older than the
 * connected window (or which signed off); each once, whichever process sweeps first.
 */
export async function sweepAgentPresence(db: Db, windowSeconds: number): Promise<number> {
  const cutoff = new Date(Date.now() - windowSeconds * 1000).toISOString();
  return db.transaction().execute(async (trx) => {
    const gone = await trx
      .updateTable('agents')
      .set({ presenceAnnounced: 0 })
      .where('presenceAnnounced', '=', 1)
      .where((eb) => eb.or([eb('lastContactAt', 'is', null), eb('lastContactAt', '<', cutoff)]))
      .returning(['id', 'accountId', 'name'])
      .execute();
    for (const agent of gone) await announcePresence(trx, agent, 'disconnected');
    return gone.length;
  });
}

/** The agent's status and pause, or undefined once it is deleted. */
export function agentState(db: Executor, agentId: string) {
  return db.selectFrom('agents').select(['status', 'pausedUntil']).where('id', '=', agentId).executeTakeFirst();
}

export async function setAgentCertificate(db: Executor, agentId: string, certificatePem: string): Promise<void> {
  await db.updateTable('agents').set({ certificatePem }).where('id', '=', agentId).execute();
}

/** Sign-off: STOPPED, and not connected until the agent's next contact. */
export async function signOffAgent(db: Executor, agentId: string): Promise<void> {
  await db.updateTable('agents').set({ status: 'STOPPED', lastContactAt: null }).where('id', '=', agentId).execute();
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
