import type { Generated } from 'kysely';

export interface AgentTable {
  /** Creation order, also within one millisecond. */
  seq: Generated<number>;
  id: string;
  accountId: string;
  name: string;
  description: string | null;
  agentType: string;
  cloudProvider: string;
  deployment: string;
  /** The status an admin set (or PENDING until the agent first reports); see agentStatus in schemas.ts. */
  status: string;
  pausedUntil: string | null;
  /** The agent's current credentials: the client id and the hash of its secret (never the secret). */
  clientId: string | null;
  secretHash: string | null;
  /** PEM of the X.509 certificate the agent registered; secrets sent to it are encrypted for its key. */
  certificate: string | null;
  lastHeartbeatAt: string | null;
  createdAt: string;
  updatedAt: string;
}

/** A piece of work handed to an agent: PENDING, DELIVERED (leased to a poll), DONE, FAILED or CANCELLED. */
export interface AgentWorkTable {
  /** Creation order, also within one millisecond. */
  seq: Generated<number>;
  id: string;
  accountId: string;
  agentId: string;
  kind: string;
  /** JSON; removed once the work is finished (a secret's ciphertext must not outlive its delivery). */
  payload: string | null;
  state: string;
  cancelRequested: number;
  deliveries: number;
  /** Until when a delivered piece stays with the poll that took it; past it, it is delivered again. */
  leaseUntil: string | null;
  /** JSON of the agent's final report. */
  result: string | null;
  createdAt: string;
  finishedAt: string | null;
}

export interface AgentTables {
  agents: AgentTable;
  agentWork: AgentWorkTable;
}
