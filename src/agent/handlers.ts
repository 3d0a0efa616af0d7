import type { KeyObject } from 'node:crypto';
import type { VaultBackend } from './vault.ts';

/** A piece of work as the server hands it out (POST /dpc/agent/v1/work/poll). */
export interface Work {
  workId: string;
  kind: string;
  payload: unknown;
  deliveries: number;
}

export interface WorkContext {
  /** Sends a progress report about this work (the server's area of the work's kind reads it). */
  report(body: Record<string, unknown>): Promise<void>;
  /** Aborts when the server says the work is cancelled. */
  signal: AbortSignal;
  vault: VaultBackend;
  /** The agent's private key: what the server sends encrypted is encrypted for it. */
  privateKey: KeyObject;
  log(message: string, fields?: Record<string, unknown>): void;
}

/**
 * Does one kind of work; what it answers is the body of the `done` report. Throwing reports `failed`
 * with the error's message (and its `code`, when it has one).
 */
export type WorkHandler = (work: Work, context: WorkContext) => Promise<Record<string, unknown>>;

const handlers = new Map<string, WorkHandler>();

/** Adds the handler of a kind of work; each kind's module registers itself (see agent.ts for the list). */
export function registerWorkHandler(kind: string, handler: WorkHandler): void {
  handlers.set(kind, handler);
}

export function workHandler(kind: string): WorkHandler | undefined {
  return handlers.get(kind);
}

/** A failure a handler reports with a machine-readable code beside its message. */
export class WorkFailure extends Error {
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}
