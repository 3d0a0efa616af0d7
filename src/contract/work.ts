/**
 * The work the server hands to agents, and what agents answer: kinds, payloads, failure codes. Both
 * sides import this module; it imports neither. A kind added here needs a report handler on the server
 * (checked when the server starts) and a work handler in each agent that runs it.
 */
import type { WarehouseType } from './sql-grammar.ts';
import type { VariableValue } from './pipeline-file.ts';

export const WORK_KINDS = {
  executePipeline: 'execute-pipeline',
  executeTests: 'execute-tests',
  writeSecret: 'write-secret',
  startStreamingPipeline: 'streaming-pipeline-start',
  stopStreamingPipeline: 'streaming-pipeline-stop',
  /** Drops a deleted streaming pipeline's replication slot and publication at its source (DELETE ...?dropSlot=true). */
  dropStreamingSlot: 'streaming-pipeline-drop-slot',
} as const;

export type WorkKind = (typeof WORK_KINDS)[keyof typeof WORK_KINDS];

export const ALL_WORK_KINDS: readonly WorkKind[] = Object.values(WORK_KINDS);

/** The codes a failed final report carries in `body.code`, each with what it means. */
export const FAILURE_CODES = {
  /** A pipeline run ended with a failed step. */
  pipelineFailed: 'pipeline-failed',
  /** The agent stopped the run because it was cancelled. */
  cancelled: 'cancelled',
  /** The agent may not run this pipeline (a component it refuses to run, such as a script where scripts are off). */
  forbidden: 'forbidden',
  /** The work was delivered again after the agent stopped while holding it; a run is not run twice. */
  interrupted: 'interrupted',
  /** write-secret: the vault secret already has the key and overwrite was not asked. */
  secretExists: 'secret-exists',
  /** streaming-pipeline-start: a secret the definition refers to is not in the vault. */
  secretMissing: 'secret-missing',
  /** streaming-pipeline-start: the agent does not move data from this source or to this target type. */
  notSupported: 'not-supported',
  /** streaming-pipeline-start: the source is not set up for change capture (the message names the setting, e.g. wal_level). */
  sourceNotReady: 'source-not-ready',
} as const;

export type FailureCode = (typeof FAILURE_CODES)[keyof typeof FAILURE_CODES];

/**
 * A failed final report's body: `{message, code?}`. execute-tests with several test pipelines, when the agent ran
 * each of them to its end and some failed (code `pipeline-failed`), adds `failedPipelines`: those that failed, so
 * that the others' lineage runs end COMPLETE rather than as the execution did (each must be one of `tests`).
 */
export interface WorkFailureBody {
  message: string;
  code?: FailureCode | string;
  failedPipelines?: string[];
}

/** execute-pipeline and execute-tests. */
export interface ExecutionPayload {
  executionId: string;
  /** The pipeline files the run needs, by path, as the artifact holds them. */
  pipelines: Record<string, string>;
  /** Resolved by the server: request > environment override > project default; grids are rows. */
  variables: Record<string, VariableValue | VariableValue[][]>;
  /** execute-pipeline: the file to run. */
  pipelineName?: string;
  /** execute-tests: the test pipeline files to run, in order. */
  tests?: string[];
  /** The account and environment the run belongs to: the embedded warehouse keeps one database per pair. */
  accountId?: string;
  environmentId?: string;
  /** The environment's warehouse; absent, the agent's embedded one. */
  warehouse?: WarehouseSpec;
}

/** write-secret. */
export interface WriteSecretPayload {
  name: string;
  key: string;
  /** The secret's type as the request gave it (PASSWORD, ...). */
  type: string;
  overwrite: boolean;
  /** Compact JWE (RSA-OAEP-256, A256GCM) for the agent's certificate; its plaintext is {"value": ...}. */
  jwe: string;
}

/**
 * Where an environment's pipelines run (execute-pipeline and execute-tests carry it). Absent: the agent's
 * embedded DuckDB database, one file per account and environment. PostgreSQL: where to connect and which
 * vault secret holds the password; the password itself never travels through the server.
 */
export interface WarehouseSpec {
  /** duckdb and postgres run; another type is refused by the agent (sql-grammar.ts). */
  type: WarehouseType;
  host?: string;
  port?: number;
  database?: string;
  user?: string;
  /** postgres: the agent's vault secret holding the password (a string, or an object with `password`). */
  secretName?: string;
  secretKey?: string;
  /** What `[Environment Default]` means for a database and a schema. */
  defaultDatabase?: string;
  defaultSchema?: string;
}

/** The value pipeline files write for "the environment's default" database or schema. */
export const ENVIRONMENT_DEFAULT = '[Environment Default]';
