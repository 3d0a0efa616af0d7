import type { Executor } from '../../core/db/database.ts';

/** A check another area makes before an agent is deleted, in the deleting transaction; it throws to refuse. */
export type AgentDeletionCheck = (trx: Executor, agentId: string) => Promise<void>;
/** What another area ends with an agent, in the deleting transaction, once every check has passed. */
export type AgentDeletionStep = (trx: Executor, agentId: string) => Promise<void>;

/**
 * What deleting an agent involves beyond its own rows. The agents area owns the deletion; an area whose rows
 * name an agent registers its check at start-up (streaming-pipelines refuses while a pipeline runs on it) or
 * what it ends with the agent (executions ends the runs the agent has not finished), so agents imports none of them.
 */
export class AgentDeletion {
  readonly #checks: AgentDeletionCheck[] = [];
  readonly #steps: AgentDeletionStep[] = [];

  refuseWhen(check: AgentDeletionCheck): void {
    this.#checks.push(check);
  }

  alsoEnd(step: AgentDeletionStep): void {
    this.#steps.push(step);
  }

  async check(trx: Executor, agentId: string): Promise<void> {
    for (const check of this.#checks) await check(trx, agentId);
  }

  /** The other areas' steps, after every check passed, before the agent's rows (and its work) go. */
  async end(trx: Executor, agentId: string): Promise<void> {
    for (const step of this.#steps) await step(trx, agentId);
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The checks of deleting an agent that other areas own (see AgentDeletion). */
    agentDeletion: AgentDeletion;
  }
}
