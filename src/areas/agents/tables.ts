import type { Generated } from 'kysely';

export interface AgentTable {
  id: string;
  accountId: string;
  name: string;
  description: string | null;
  agentType: string;
  cloudProvider: string;
  deployment: string;
  /** PENDING, RUNNING or STOPPED as last moved; PAUSED is shown while pausedUntil is ahead. */
  status: string;
  pausedUntil: string | null;
  /** The agent's own client id (null until credentials are issued); its secret is kept only as a hash. */
  clientId: string | null;
  secretHash: string | null;
  /** The same secret sealed with the server's key, so that an admin can read it back until it is rotated. */
  sealedSecret: string | null;
  /** The agent's X.509 certificate (PEM); secrets sent to the agent are encrypted for its public key. */
  certificatePem: string | null;
  /** Last heartbeat or poll, from any server instance: `connected` is derived from it. */
  lastContactAt: string | null;
  /** 1 once `agent.connected` was announced for the current contact, 0 once `agent.disconnected` was (0033_agent_presence). */
  presenceAnnounced: Generated<number>;
  createdAt: string;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion: Generated<number>;
}

export interface AgentWorkTable {
  id: string;
  accountId: string;
  agentId: string;
  kind: string;
  /** JSON; cleared once the work is finished or cancelled (it may hold a secret's ciphertext). */
  payload: string | null;
  /** queued, delivered, done, failed or cancelled. */
  state: string;
  deliveries: number;
  /** While delivered: when the agent's hold on it lapses and it is handed out again. */
  leasedUntil: string | null;
  cancelRequested: number;
  /** JSON body of the final report. */
  result: string | null;
  /** The highest report sequence recorded for the current delivery (0: none); reset on each delivery. */
  reportSequence: number;
  createdAt: string;
  finishedAt: string | null;
}

export interface AgentTables {
  agents: AgentTable;
  agentWork: AgentWorkTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends AgentTables {}
}
