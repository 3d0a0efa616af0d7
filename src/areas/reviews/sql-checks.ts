/**
 * Whether SQL parses, checked off the request thread. node-sql-parser's parsers backtrack, and some short
 * inputs take them exponential time and memory (`SELECT ((((((((((((1`: seconds; a few more brackets, minutes
 * and gigabytes); a parse cannot be interrupted. So the server parses in a worker thread of its own, one
 * statement at a time, each within STATEMENT_MS and a review's statements within REVIEW_MS: a statement past
 * its time ends the worker (a fresh one takes the next) and is answered "not checked", as is every statement of
 * a review whose time ran out. The worker's heap is bounded too (WORKER_HEAP_MB): running out ends it the same
 * way. The event loop is never held: other requests go on while a review waits.
 */
import { Worker } from 'node:worker_threads';
import { sqlParserModule } from '../../contract/sql-parser.ts';

/** How long one statement may take to parse. */
export const STATEMENT_MS = 1000;
/** How long the statements of one review may take together (waiting for the worker included). */
export const REVIEW_MS = 10_000;
/** How long a worker may take to load a grammar's build (several MB of code), before the statement's time starts. */
const LOADING_MS = 30_000;
/** The worker's heap at most. */
const WORKER_HEAP_MB = 256;
/** An idle worker is ended after this long (its grammars' code is several MB each). */
const IDLE_MS = 60_000;

export type SqlVerdict =
  | { parses: true }
  | { parses: false; message: string; line?: number }
  /** Not parsed within its time (or the worker ran out of memory): neither good nor bad. */
  | { parses: undefined; why: string };

/** The worker: loads each grammar's build once (source maps off: of no use here), parses what it is sent. */
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
process.setSourceMapsEnabled?.(false);
const parsers = new Map();
parentPort.on('message', ({ module, grammar, sql }) => {
  let parser = parsers.get(module);
  if (!parser) {
    parser = new (require(module).Parser)();
    parsers.set(module, parser);
  }
  parentPort.postMessage({ started: true });
  try {
    parser.astify(sql, { database: grammar });
    parentPort.postMessage({ parses: true });
  } catch (error) {
    const message = String((error && error.message) || error).split('\\n')[0].slice(0, 300);
    const line = error && error.location && error.location.start ? error.location.start.line : undefined;
    parentPort.postMessage({ parses: false, message, line });
  }
});`;

interface Pending {
  grammar: string;
  sql: string;
  /** When its review's time runs out (performance.now()). */
  notAfter: number;
  resolve(verdict: SqlVerdict): void;
}

/** One worker and the statements waiting for it, in the order asked. */
class SqlChecks {
  #worker: Worker | undefined;
  #idle: NodeJS.Timeout | undefined;
  readonly #queue: Pending[] = [];
  #running = false;

  check(grammar: string, sql: string, notAfter: number): Promise<SqlVerdict> {
    return new Promise((resolve) => {
      this.#queue.push({ grammar, sql, notAfter, resolve });
      if (!this.#running) void this.#drain();
    });
  }

  async #drain(): Promise<void> {
    this.#running = true;
    clearTimeout(this.#idle);
    try {
      for (let next = this.#queue.shift(); next; next = this.#queue.shift()) {
        const left = next.notAfter - performance.now();
        try {
          next.resolve(
            left <= 0
              ? { parses: undefined, why: `not checked: the review's ${REVIEW_MS / 1000} s for its SQL ran out` }
              : await this.#parse(next, Math.min(STATEMENT_MS, left)),
          );
        } catch (error) {
          // No grammar of that name, or no worker to be had: said, and the next statement goes on.
          next.resolve({ parses: undefined, why: `not checked: ${(error as Error).message}` });
        }
      }
    } finally {
      this.#running = false;
      this.#idle = setTimeout(() => this.#end(), IDLE_MS).unref();
    }
  }

  #parse(pending: Pending, ms: number): Promise<SqlVerdict> {
    const module = sqlParserModule(pending.grammar); // throws for a grammar there is none of, before the worker is asked
    const worker = (this.#worker ??= this.#start());
    return new Promise((resolve) => {
      const settle = (verdict: SqlVerdict, end: boolean) => {
        clearTimeout(timer);
        worker.off('message', answered);
        worker.off('exit', exited);
        if (end) this.#end();
        resolve(verdict);
      };
      const late = (after: number) => () =>
        settle({ parses: undefined, why: `not checked: it did not parse within ${after} ms` }, true);
      // The statement's time starts once its grammar is loaded (the first use of a grammar loads its build).
      let timer = setTimeout(late(LOADING_MS), LOADING_MS);
      const answered = (message: SqlVerdict | { started: true }) => {
        if (!('started' in message)) return settle(message, false);
        clearTimeout(timer);
        timer = setTimeout(late(ms), ms);
      };
      const exited = () => settle({ parses: undefined, why: 'not checked: parsing it took more memory than a check may' }, true);
      worker.on('message', answered);
      worker.once('exit', exited);
      worker.postMessage({ module, grammar: pending.grammar, sql: pending.sql });
    });
  }

  #start(): Worker {
    const worker = new Worker(WORKER_SOURCE, { eval: true, resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB } });
    worker.unref();
    // An error ends the worker ('exit' follows): the statement in hand is answered then, the next gets a new one.
    worker.on('error', () => {});
    worker.once('exit', () => {
      if (this.#worker === worker) this.#worker = undefined;
    });
    return worker;
  }

  #end(): void {
    const worker = this.#worker;
    this.#worker = undefined;
    void worker?.terminate();
  }
}

const checks = new SqlChecks();

/**
 * Parses each of `statements` in `grammar` (node-sql-parser's name), within STATEMENT_MS each and REVIEW_MS
 * together; answers a verdict per statement, in order.
 */
export function checkSql(grammar: string, statements: readonly string[]): Promise<SqlVerdict[]> {
  const notAfter = performance.now() + REVIEW_MS;
  return Promise.all(statements.map((sql) => checks.check(grammar, sql, notAfter)));
}
