/**
 * What a work handler of the reference agent gets and answers: the delivered work, a context (reports,
 * cancel signal, vault, log, the agent's key), and WorkFailure for a failure with a contract code.
 */
import type { KeyObject } from 'node:crypto';
import type { FailureCode } from '../contract/work.ts';
import type { VaultBackend } from './vault.ts';

export interface DeliveredWork {
  workId: string;
  kind: string;
  payload: unknown;
  /** 1 on the first delivery; more when an earlier delivery's lease lapsed without a final report. */
  delivery: number;
}

export interface WorkContext {
  /** Sends a progress report (it also keeps the work's lease alive). */
  report(body: unknown): Promise<void>;
  /** Aborts when the server says the work was cancelled, or the agent is stopping. */
  signal: AbortSignal;
  vault: VaultBackend;
  log(message: string, fields?: Record<string, unknown>): void;
  /** The agent's private key, matching the certificate it registered: what secrets are encrypted for. */
  privateKey: KeyObject;
  /** The agent's state folder: the embedded warehouse's files live under it. */
  stateDir: string;
  /** Whether python-script and bash-script components may run here. */
  allowScripts: boolean;
  /** The agent's deadline for one warehouse statement, in ms (0: none). */
  statementTimeoutMs: number;
  /** Platform-hosted: the embedded warehouse has no file system or network access. */
  sandboxed: boolean;
  /** A PostgreSQL URL for runs whose environment names no warehouse (a schema per account and environment); else DuckDB. */
  defaultWarehouseUrl?: string;
  /** With defaultWarehouseUrl: a role per account and environment, its password derived from this key (warehouse/roles.ts). */
  warehouseRoleKey?: string;
  /** What serves `s3` streaming targets: `file:///folder` keeps each bucket as a folder there (absent: none). */
  objectStore?: string;
  /** The Azure Blob endpoint of `abs` streaming targets, `{account}` standing for the account name (absent: Azure's own). */
  blobEndpoint?: string;
}

export type WorkHandler = (work: DeliveredWork, ctx: WorkContext) => Promise<unknown>;

/** A failure the handler names with a code the server understands (e.g. secret-exists). */
export class WorkFailure extends Error {
  constructor(
    message: string,
    readonly code: FailureCode,
    /** execute-tests: the test pipelines that failed, each having run to its end (WorkFailureBody). */
    readonly failedPipelines?: string[],
  ) {
    super(message);
  }
}
