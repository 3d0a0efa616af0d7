/**
 * The agents' rules: where an agent may run, unique names, its client credentials (hashed for checking,
 * sealed for reading back), how it is shown (connected, paused) and when its presence is announced. The SQL
 * is the repository's (repository.ts).
 */
import { randomUUID, X509Certificate } from 'node:crypto';
import type { Db, Executor } from '../../core/db/database.ts';
import { isUniqueViolation } from '../../core/db/database.ts';
import { emit } from '../../core/outbox.ts';
import { conflict, notFound, ProblemError, unprocessable } from '../../core/problems.ts';
import { hashSecret, newClientSecret } from '../../core/auth/secrets.ts';
import type { SecretBox } from '../../core/secret-box.ts';
import { checkExpectedVersion } from '../../core/conditional.ts';
import type { AgentDeletion } from './deletion.ts';
import {
  deleteAgentRow,
  findAgent,
  findAgentNamed,
  insertAgent,
  markPresenceAnnounced,
  recordContact,
  setAgentClient,
  unmarkAbsentAgents,
  updateAgentRow,
  type AgentRow,
  type NewAgent,
} from './repository.ts';
import {
  DEPLOYMENTS_OF,
  type Agent,
  type AgentStatus,
  type AgentSummary,
  type CreateAgentRequest,
  type UpdateAgentRequest,
} from './schemas.ts';

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

/** Runs `write`, answering a unique violation (the only unique column an agent has is its name) as 409. */
async function withUniqueName<T>(name: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (isUniqueViolation(error)) throw nameTaken(name);
    throw error;
  }
}

/** The agent `agentId` of the account, or a 404: another account's agent is answered as one that does not exist. */
export async function requireAgent(db: Executor, accountId: string, agentId: string): Promise<AgentRow> {
  const row = await findAgent(db, accountId, agentId);
  if (!row) throw notFound(`Agent ${agentId} does not exist.`);
  return row;
}

export async function createAgent(db: Executor, accountId: string, request: CreateAgentRequest): Promise<string> {
  checkPlacement(request.cloudProvider, request.deployment);
  const agent: NewAgent = {
    id: randomUUID(),
    accountId,
    name: request.name,
    description: request.description ?? null,
    agentType: request.agentType,
    cloudProvider: request.cloudProvider,
    deployment: request.deployment,
  };
  await withUniqueName(request.name, () => insertAgent(db, agent));
  return agent.id;
}

/**
 * The account's agent of `agentType` named `name`, registered on first need. Two requests that need it at
 * once get the same agent; a name taken by an agent of another type is a 409.
 */
export async function agentNamed(db: Executor, accountId: string, agent: Omit<NewAgent, 'id' | 'accountId'>): Promise<string> {
  const found = await findAgentNamed(db, accountId, agent.agentType, agent.name);
  if (found) return found.id;
  const id = randomUUID();
  try {
    await insertAgent(db, { ...agent, id, accountId });
    return id;
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    const again = await findAgentNamed(db, accountId, agent.agentType, agent.name);
    if (again) return again.id;
    throw nameTaken(agent.name);
  }
}

export async function updateAgent(
  db: Executor,
  accountId: string,
  agentId: string,
  request: UpdateAgentRequest,
): Promise<AgentRow> {
  const row = await requireAgent(db, accountId, agentId);
  // Who runs an agent is not a label: runs are priced by it (consumption's credits per agent type), and a
  // relabelled platform agent would reprice every run it made.
  const hosted = 'PLATFORM_HOSTED';
  if (
    request.agentType !== undefined &&
    request.agentType !== row.agentType &&
    (row.agentType === hosted || request.agentType === hosted)
  ) {
    throw new ProblemError(
      409,
      `An agent's type cannot change to or from ${hosted}: the platform runs such an agent, the customer runs the others.`,
      {
        violations: [`body.agentType: is ${row.agentType}; it cannot become ${request.agentType}`],
      },
    );
  }
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
  const { name, description, agentType, cloudProvider, deployment, pausedUntil } = next;
  await withUniqueName(name, () =>
    updateAgentRow(db, agentId, { name, description, agentType, cloudProvider, deployment, pausedUntil }),
  );
  return next;
}

/**
 * Removes the agent with its work, unless a check of another area refuses; other areas end what they hold of it
 * first (app.agentDeletion), in the same transaction.
 */
export async function deleteAgent(db: Executor, accountId: string, agentId: string, deletion: AgentDeletion): Promise<void> {
  // With If-Match: an agent changed or deleted since the check is a 412, before a 404 or another area's 409.
  const row = await findAgent(db, accountId, agentId);
  checkExpectedVersion('agents', agentId, row && Number(row.rowVersion));
  if (!row) throw notFound(`Agent ${agentId} does not exist.`);
  await deletion.check(db, agentId);
  await deletion.end(db, agentId);
  await deleteAgentRow(db, agentId);
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
    return setAgentClient(trx, agentId, { clientId, secretHash, sealedSecret }, onlyIfNone);
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
 * Records contact: connected from now for the window, and RUNNING unless paused (or already so). The first
 * contact after being out of contact is announced (`agent.connected`), once across server processes.
 */
export async function touchAgent(db: Db, agentId: string): Promise<void> {
  const touched = await recordContact(db, agentId);
  if (!touched || touched.presenceAnnounced === 1) return;
  await db.transaction().execute(async (trx) => {
    const agent = await markPresenceAnnounced(trx, agentId);
    if (agent) await announcePresence(trx, { id: agentId, ...agent }, 'connected');
  });
}

/**
 * Announces `agent.disconnected` for agents announced connected whose last contact is older than the
 * connected window (or which signed off); each once, whichever process sweeps first.
 */
export async function sweepAgentPresence(db: Db, windowSeconds: number): Promise<number> {
  const cutoff = new Date(Date.now() - windowSeconds * 1000).toISOString();
  return db.transaction().execute(async (trx) => {
    const gone = await unmarkAbsentAgents(trx, cutoff);
    for (const agent of gone) await announcePresence(trx, agent, 'disconnected');
    return gone.length;
  });
}
