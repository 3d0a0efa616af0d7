import type { Dialect, Trx } from '../../core/db/database.ts';

/** Work another area does in the deleting transaction (its rows that hold the project without a foreign key). */
export type InTransactionStep = (trx: Trx, dialect: Dialect, accountId: string, projectId: string) => Promise<void>;
/** Work another area does once the deletion has committed (what lives outside the store, such as files). */
export type AfterCommitStep = (projectId: string) => Promise<void>;

/**
 * What deleting a project involves beyond its own rows. The projects area owns the deletion; areas that keep
 * something of a project register their part at start-up (scim: group memberships; repositories: the hosted
 * Git repository), so projects imports none of them and no cycle between areas arises.
 */
export class ProjectDeletion {
  readonly #inTransaction: { area: string; step: InTransactionStep }[] = [];
  readonly #afterRows: { area: string; step: InTransactionStep }[] = [];
  readonly #afterCommit: { area: string; step: AfterCommitStep }[] = [];

  inTransaction(area: string, step: InTransactionStep): void {
    this.#inTransaction.push({ area, step });
  }

  /**
   * Work in the deleting transaction once the project's own rows (its runs with them) are deleted: for rows
   * that writes on a run add, so that a write that began before the deletion has ended (PostgreSQL: deleting
   * the run waited for its lock) or fails (its run is gone) before they are deleted.
   */
  afterRows(area: string, step: InTransactionStep): void {
    this.#afterRows.push({ area, step });
  }

  afterCommit(area: string, step: AfterCommitStep): void {
    this.#afterCommit.push({ area, step });
  }

  async runInTransaction(trx: Trx, dialect: Dialect, accountId: string, projectId: string): Promise<void> {
    for (const { step } of this.#inTransaction) await step(trx, dialect, accountId, projectId);
  }

  async runAfterRows(trx: Trx, dialect: Dialect, accountId: string, projectId: string): Promise<void> {
    for (const { step } of this.#afterRows) await step(trx, dialect, accountId, projectId);
  }

  async runAfterCommit(projectId: string): Promise<void> {
    for (const { step } of this.#afterCommit) await step(projectId);
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The steps of deleting a project that other areas own (see ProjectDeletion). */
    projectDeletion: ProjectDeletion;
  }
}
