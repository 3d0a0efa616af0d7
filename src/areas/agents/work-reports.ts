import { ALL_WORK_KINDS, type WorkKind } from '../../contract/work.ts';
import type { AgentWorkReportHandler } from './work.ts';

/**
 * What the server does when an agent reports on its work, one handler per kind of the contract. It is an
 * app decoration (`app.agentWorkReports`): the area that queues a kind registers its handler when its routes
 * are registered, and the server refuses to start unless every kind of src/contract/work.ts has one. A report
 * on work of a kind without a handler (a row written by another version) is an error, never silently dropped.
 */
export class AgentWorkReports {
  readonly #handlers = new Map<string, AgentWorkReportHandler>();

  /** Registers what happens when an agent reports on work of `kind`; a kind has one handler. */
  on(kind: WorkKind, handler: AgentWorkReportHandler): void {
    if (!ALL_WORK_KINDS.includes(kind)) throw new Error(`"${kind}" is not a work kind of the contract`);
    if (this.#handlers.has(kind)) throw new Error(`work kind "${kind}" already has a report handler`);
    this.#handlers.set(kind, handler);
  }

  /** The handler of `kind`; throws when there is none (the report is then refused as a server error). */
  handlerOf(kind: string): AgentWorkReportHandler {
    const handler = this.#handlers.get(kind);
    if (!handler) throw new Error(`no report handler for work kind "${kind}": the report is refused`);
    return handler;
  }

  /** Throws unless every kind of the contract has a handler (called when the server starts). */
  assertComplete(): void {
    const missing = ALL_WORK_KINDS.filter((kind) => !this.#handlers.has(kind));
    if (missing.length > 0) throw new Error(`work kinds without a report handler: ${missing.join(', ')}`);
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Report handlers per work kind (see AgentWorkReports). */
    agentWorkReports: AgentWorkReports;
  }
}
