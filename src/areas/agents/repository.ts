import { X509Certificate, randomBytes, randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { isForeignKeyViolation, isUniqueViolation, now, sql } from '../../core/db/database.ts';
import { hashSecret, newClientSecret } from '../../core/auth/secrets.ts';
import { offsetOf, pageOf, countOf } from '../../core/paging.ts';
import { badRequest, conflict, notFound } from '../../core/problems.ts';
import type { AgentTable } from './tables.ts';
import {
  DEPLOYMENTS,
  type Agent,
  type AgentListQuery,
  type AgentStatus,
  type AgentSummary,
  type CreateAgentRequest,
  type UpdateAgentRequest,
} from './schemas.ts';

type AgentRow = Selectable<AgentTable>;

/** The status an agent is in now: a pause whose time has passed is over, as if the agent had been resumed. */
export function statusOf(row: Pick<AgentRow, 'status' | 'pausedUntil' | 'lastHeartbeatAt'>, at = now()): AgentStatus {
  if (row.status === 'PAUSED' && row.pausedUntil !== null && row.pausedUntil <= at) return nextAgentStatus(row, 'RUNNING');
  return row.status as AgentStatus;
}

/** Whether the agent's last heartbeat is recent enough for it to count as in contact. */
export function isConnected(row: Pick<AgentRow, 'lastHeartbeatAt'>, connectedSeconds: number): boolean {
  return row.lastHeartbeatAt !== null && Date.parse(row.lastHeartbeatAt) > Date.now() - connectedSeconds * 1000;
}

/** Whether the agent takes work now: it is running (or its pause is over). */
export function takesWork(row: Pick<AgentRow, 'status' | 'pausedUntil' | 'lastHeartbeatAt'>): boolean {
  return statusOf(row) === 'RUNNING';
}

function toSummary(row: AgentRow, connectedSeconds: number): AgentSummary {
  const status = statusOf(row);
  return {
    agentId: row.id,
    agentStatus: status,
    agentType: row.agentType as AgentSummary['agentType'],
    cloudProvider: row.cloudProvider as AgentSummary['cloudProvider'],
    connected: isConnected(row, connectedSeconds),
    deployment: row.deployment,
    ...(row.description !== null && { description: row.description }),
    name: row.name,
    ...(status === 'PAUSED' && row.pausedUntil !== null && { pausedUntil: row.pausedUntil }),
  };
}

export function toAgent(row: AgentRow, connectedSeconds: number): Agent {
  return {
    ...toSummary(row, connectedSeconds),
    hasCertificate: row.certificate !== null,
    hasCredentials: row.clientId !== null,
    ...(row.lastHeartbeatAt !== null && { lastHeartbeatAt: row.lastHeartbeatAt }),
    createdAt: row.createdAt,
  };
}

/**
 * The one place agent statuses move. An admin pauses (optionally until a time), stops or resumes an agent;
 * the agent's first heartbeat moves PENDING to RUNNING (`recordHeartbeat`). Resuming an agent that has
 * never been in contact leaves it PENDING.
 */
export function nextAgentStatus(
  row: Pick<AgentRow, 'lastHeartbeatAt'>,
  requested: 'RUNNING' | 'PAUSED' | 'STOPPED',
): AgentStatus {
  if (requested !== 'RUNNING') return requested;
  return row.lastHeartbeatAt === null ? 'PENDING' : 'RUNNING';
}

function checkDeployment(cloudProvider: string, deployment: string): void {
  const allowed = DEPLOYMENTS[cloudProvider as keyof typeof DEPLOYMENTS];
  if (!allowed.includes(deployment)) {
    throw badRequest(`An agent on ${cloudProvider} is deployed on ${allowed.join(' or ')}.`, [
      `deployment: must be one of ${allowed.join(', ')} for cloudProvider ${cloudProvider}`,
    ]);
  }
}

function nameTaken(name: string) {
  return conflict(`An agent named "${name}" already exists in this account.`);
}

export async function createAgent(db: Executor, accountId: string, request: CreateAgentRequest): Promise<string> {
  checkDeployment(request.cloudProvider, request.deployment);
  const id = randomUUID();
  const at = now();
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
        certificate: null,
        lastHeartbeatAt: null,
        createdAt: at,
        updatedAt: at,
      })
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(request.name);
    throw error;
  }
  return id;
}

export async function requireAgent(db: Executor, accountId: string, agentId: string): Promise<AgentRow> {
  const row = await db
    .selectFrom('agents')
    .selectAll()
    .where('id', '=', agentId)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (!row) throw notFound(`Agent ${agentId} does not exist in this account.`);
  return row;
}

/** The account's agents by name, filtered by status (as it is now), type and a part of the name. */
export async function listAgents(db: Executor, accountId: string, query: AgentListQuery, connectedSeconds: number) {
  const at = now();
  let filtered = db.selectFrom('agents').where('accountId', '=', accountId);
  if (query.agentType) filtered = filtered.where('agentType', '=', query.agentType);
  if (query.name)
    filtered = filtered.where(sql<boolean>`lower(name) like ${`%${escapeLike(query.name.toLowerCase())}%`} escape '\\'`);
  if (query.agentStatus) {
    // A lapsed pause counts as the status a resume gives: RUNNING once in contact, else PENDING.
    const lapsedPause = (eb: any) => eb.and([eb('status', '=', 'PAUSED'), eb('pausedUntil', '<=', at)]);
    const resumed = query.agentStatus === 'RUNNING' ? 'is not' : 'is';
    filtered = filtered.where((eb) =>
      query.agentStatus === 'PAUSED'
        ? eb.and([eb('status', '=', 'PAUSED'), eb.or([eb('pausedUntil', 'is', null), eb('pausedUntil', '>', at)])])
        : query.agentStatus === 'STOPPED'
          ? eb('status', '=', 'STOPPED')
          : eb.or([eb('status', '=', query.agentStatus!), eb.and([lapsedPause(eb), eb('lastHeartbeatAt', resumed, null)])]),
    );
  }
  const [rows, total] = await Promise.all([
    filtered.selectAll().orderBy('name').orderBy('seq').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(filtered),
  ]);
  return pageOf(
    query,
    rows.map((row) => toSummary(row, connectedSeconds)),
    total,
  );
}

function escapeLike(text: string): string {
  return text.replace(/[\\%_]/g, (c) => `\\${c}`);
}

export async function updateAgent(db: Executor, accountId: string, agentId: string, request: UpdateAgentRequest): Promise<void> {
  const row = await requireAgent(db, accountId, agentId);
  if (request.pausedUntil !== undefined && request.agentStatus !== 'PAUSED') {
    throw badRequest('pausedUntil goes with agentStatus PAUSED.', ['pausedUntil: only with agentStatus PAUSED']);
  }
  const status = request.agentStatus ? nextAgentStatus(row, request.agentStatus) : undefined;
  try {
    await db
      .updateTable('agents')
      .set({
        ...(request.name !== undefined && { name: request.name }),
        ...(request.description !== undefined && { description: request.description }),
        ...(status !== undefined && { status, pausedUntil: status === 'PAUSED' ? (request.pausedUntil ?? null) : null }),
        updatedAt: now(),
      })
      .where('id', '=', agentId)
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(request.name!);
    throw error;
  }
}

export async function deleteAgent(db: Executor, accountId: string, agentId: string): Promise<void> {
  await requireAgent(db, accountId, agentId);
  try {
    await db.deleteFrom('agents').where('id', '=', agentId).execute();
  } catch (error) {
    if (isForeignKeyViolation(error)) {
      throw conflict(`Agent ${agentId} runs streaming pipelines; delete them or move them to another agent first.`);
    }
    throw error;
  }
}

/** New credentials for the agent; the old ones (and the tokens issued for them) stop working. */
export async function issueAgentCredentials(db: Executor, accountId: string, agentId: string) {
  await requireAgent(db, accountId, agentId);
  const clientId = `agent-${randomBytes(12).toString('base64url')}`;
  const clientSecret = newClientSecret();
  await db
    .updateTable('agents')
    .set({ clientId, secretHash: await hashSecret(clientSecret), updatedAt: now() })
    .where('id', '=', agentId)
    .execute();
  return { clientId, clientSecret };
}

/** The agent behind an agent token, as long as the token's credentials are the agent's current ones. */
export async function agentOfToken(db: Executor, agentId: string, clientId: string): Promise<AgentRow | undefined> {
  return db.selectFrom('agents').selectAll().where('id', '=', agentId).where('clientId', '=', clientId).executeTakeFirst();
}

/** Records a heartbeat: the agent is in contact now, and running if it never was before. */
export async function recordHeartbeat(db: Executor, agentId: string): Promise<void> {
  const at = now();
  await db
    .updateTable('agents')
    .set((eb) => ({
      lastHeartbeatAt: at,
      status: eb.case().when('status', '=', 'PENDING').then('RUNNING').else(eb.ref('status')).end(),
    }))
    .where('id', '=', agentId)
    .execute();
}

/**
 * Checks and keeps the agent's X.509 certificate (PEM): it must parse, be valid now and carry an RSA key
 * of at least 2048 bits, because secrets are encrypted for it with RSA-OAEP-256. Answers its SHA-256 fingerprint.
 */
export async function registerCertificate(db: Executor, agentId: string, pem: string): Promise<string> {
  let certificate: X509Certificate;
  try {
    certificate = new X509Certificate(pem);
  } catch {
    throw badRequest('The certificate is not a PEM X.509 certificate.', ['certificate: not a PEM X.509 certificate']);
  }
  const key = certificate.publicKey;
  if (key.asymmetricKeyType !== 'rsa' || (key.asymmetricKeyDetails?.modulusLength ?? 0) < 2048) {
    throw badRequest('The certificate must carry an RSA public key of at least 2048 bits.', [
      'certificate: needs an RSA key >= 2048 bits',
    ]);
  }
  const at = Date.now();
  if (Date.parse(certificate.validFrom) > at || Date.parse(certificate.validTo) < at) {
    throw badRequest('The certificate is not valid now.', [
      `certificate: valid from ${certificate.validFrom} to ${certificate.validTo}`,
    ]);
  }
  await db
    .updateTable('agents')
    .set({ certificate: certificate.toString(), updatedAt: now() })
    .where('id', '=', agentId)
    .execute();
  return certificate.fingerprint256;
}
