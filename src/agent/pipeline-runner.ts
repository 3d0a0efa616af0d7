/**
 * Runs an orchestration pipeline (`.orch.yaml`) the way the reference agent does: a graph of components
 * joined by success, failure and unconditional transitions (and `if`'s true and false), walked from the
 * start component. Work happens in the environment's warehouse (given as `services.warehouse`), in child
 * pipelines of the same artifact, and in scripts (given as `services.runScript`, only where allowed).
 * Nothing here does I/O itself but the wait; the caller hands in the warehouse and the script runner.
 */

import {
  parsePipelineFile,
  PIPELINE_SUFFIXES,
  type Component,
  type Pipeline,
  type VariableValue,
  type VariableValues,
} from '../contract/pipeline-file.ts';
import { qualifiedName, type TableName } from '../contract/sql-dialect.ts';
import { compileTransformation, type CompiledOutput } from '../contract/transformation.ts';
import { listOf, rowsOf, substitute, yes } from '../contract/variables.ts';
import { ENVIRONMENT_DEFAULT } from '../contract/work.ts';
import type { Warehouse } from './warehouse/warehouse.ts';
import type { StepLineage } from '../contract/lineage.ts';
import { sqlLineage } from '../contract/sql-lineage.ts';

export type StepStatus = 'RUNNING' | 'SUCCESS' | 'FAILED' | 'SKIPPED' | 'CANCELLED';

export interface Step {
  /** Position in the run, from 0: a step is reported when it starts and again when it ends. */
  index: number;
  name: string;
  status: StepStatus;
  startedAt: string;
  finishedAt?: string;
  message?: string;
  /** The pipeline file the step belongs to, when it is not the run's own (tests, child pipelines). */
  childPipeline?: string;
  /** A child pipeline's step: the index of the step that runs that pipeline (its run in lineage). */
  parentStep?: number;
  /** A step that runs a child pipeline (run-orchestration, run-transformation): that pipeline, once it is known. */
  runsPipeline?: string;
  /** The datasets the step read and wrote, when it ran SQL the parser could read (reported when it ends). */
  lineage?: StepLineage;
  /** Rows the step's SQL wrote, where the warehouse tells (RunResult.rowsWritten); absent when not known. */
  rowsWritten?: number;
}

/** The child pipeline a step belongs to, and the step that runs it (absent for a test run's test pipelines). */
interface ChildOf {
  pipeline: string;
  parentStep?: number;
}

/** What a component's work answers: its step's message, the datasets it read and wrote, the rows it wrote. */
type WorkAnswer = string | undefined | { message?: string; lineage?: StepLineage; rowsWritten?: number };

export type RunStatus = 'SUCCESS' | 'FAILED' | 'CANCELLED';

export interface RunOutcome {
  status: RunStatus;
  message: string;
  steps: Step[];
}

export interface ScriptResult {
  exitCode: number | null;
  output: string;
  timedOut: boolean;
}

/** What the runner may use beyond the pipeline itself. */
export interface RunServices {
  /** The environment's warehouse, opened on first use. */
  warehouse?: () => Promise<Warehouse>;
  /** Every pipeline file of the artifact, by path: where child pipelines come from. */
  pipelines?: Record<string, string>;
  /** The project's variables as the server resolved them: what a child pipeline starts with. */
  projectVariables?: VariableValues;
  /** Runs a script; absent, scripts are not allowed on this agent. */
  runScript?: (
    language: 'python' | 'bash',
    script: string,
    env: Record<string, string>,
    timeoutMs: number,
    signal: AbortSignal,
  ) => Promise<ScriptResult>;
}

export interface RunOptions {
  variables: VariableValues;
  signal: AbortSignal;
  /** Told each step when it starts and when it ends. */
  onStep?: (step: Step) => Promise<void> | void;
  /** Numbering of the first step (a test run continues the numbering across its pipelines). */
  firstIndex?: number;
  childPipeline?: string;
  /** Told what print-variables prints. */
  print?: (line: string) => void;
  /** The clock; tests replace it. */
  now?: () => Date;
  services?: RunServices;
}

/**
 * How deep iterators, retries and child pipelines may run within each other. A pipeline that runs itself (a
 * child named through a variable) or iterators that run each other would otherwise run without end: past it the
 * step fails naming the chain, and so does every later attempt to go deeper in that run.
 */
export const MAX_NESTING = 32;

/** Iterations at once for a concurrent iterator unless it says (`maxConcurrency`). */
const DEFAULT_CONCURRENCY = 4;
const MAX_CONCURRENCY = 16;
/** What a step keeps of a script's output. */
const SCRIPT_OUTPUT_LIMIT = 8_000;

/**
 * A run's variables as one pipeline (or one iteration) sees them. COPIED variables are this scope's own
 * (an iteration or a child starts with a copy); SHARED ones live in the root scope, so a write anywhere is
 * seen everywhere in the pipeline. Keyed by user-chosen names: objects without a prototype.
 */
class Scope {
  private own: VariableValues;

  constructor(
    values: VariableValues,
    private readonly declared: Pipeline['variables'],
    private readonly root?: Scope,
    /** The iterators, retries and child pipelines this scope runs within, outermost first (see MAX_NESTING). */
    readonly nesting: readonly string[] = [],
  ) {
    this.own = Object.assign(Object.create(null) as VariableValues, values);
  }

  /** This very scope (its variables shared, not copied) one level deeper: what a retry runs its component in. */
  within(frame: string): Scope {
    const scope = new Scope({}, this.declared, this.root, [...this.nesting, frame]);
    scope.own = this.own;
    return scope;
  }

  private isShared(name: string): boolean {
    return this.root !== undefined && Object.hasOwn(this.declared, name) && this.declared[name].scope === 'SHARED';
  }

  has(name: string): boolean {
    return this.isShared(name) ? this.root!.has(name) : Object.hasOwn(this.own, name);
  }

  get(name: string): VariableValue | VariableValue[][] | undefined {
    if (this.isShared(name)) return this.root!.get(name);
    return Object.hasOwn(this.own, name) ? this.own[name] : undefined;
  }

  /** Sets a variable, its value kept in the declared type (a NUMBER from a query is a number). */
  set(name: string, value: unknown): void {
    const type = Object.hasOwn(this.declared, name) ? this.declared[name].type : undefined;
    let kept: VariableValue | VariableValue[][];
    if (Array.isArray(value)) kept = value as VariableValue[][];
    else if (type === 'NUMBER') {
      const number = Number(value);
      if (value === null || value === undefined || value === '' || !Number.isFinite(number)) {
        throw new Error(`Variable "${name}" is a NUMBER; ${value === null ? 'null' : `"${String(value)}"`} is not a number.`);
      }
      kept = number;
    } else kept = value === null || value === undefined ? '' : typeof value === 'number' ? value : String(value);
    if (this.isShared(name)) this.root!.set(name, kept);
    else this.own[name] = kept;
  }

  /** A scope for one iteration: COPIED variables copied, SHARED ones still the root's; `frame` nests it one level deeper. */
  copy(frame?: string): Scope {
    return new Scope(this.own, this.declared, this.root ?? this, frame === undefined ? this.nesting : [...this.nesting, frame]);
  }

  /** Every variable as a plain object (what `${name}` substitution and scripts read). */
  values(): VariableValues {
    const all = Object.assign(Object.create(null) as VariableValues, this.root ? this.root.values() : {}, this.own);
    return all;
  }
}

/** Waits `ms`, or rejects as soon as `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

const COMPARATORS = new Map<string, (actual: VariableValue, expected: string) => boolean>([
  ['==', (actual, expected) => String(actual) === expected],
  ['!=', (actual, expected) => String(actual) !== expected],
  ['<', (actual, expected) => Number(actual) < Number(expected)],
  ['<=', (actual, expected) => Number(actual) <= Number(expected)],
  ['>', (actual, expected) => Number(actual) > Number(expected)],
  ['>=', (actual, expected) => Number(actual) >= Number(expected)],
]);

/** The `if` component's comparators, by the names pipeline files use. */
function compareNamed(actual: VariableValue | undefined, comparator: string, expected: string): boolean {
  const a = actual === undefined ? '' : actual;
  const numeric =
    String(a).trim() !== '' && expected.trim() !== '' && Number.isFinite(Number(a)) && Number.isFinite(Number(expected));
  const order = numeric ? Number(a) - Number(expected) : String(a).localeCompare(expected);
  switch (comparator.trim().toLowerCase()) {
    case 'equal to':
    case '==':
      return numeric ? order === 0 : String(a) === expected;
    case 'not equal to':
    case '!=':
      return numeric ? order !== 0 : String(a) !== expected;
    case 'greater than':
    case '>':
      return order > 0;
    case 'less than':
    case '<':
      return order < 0;
    case 'greater than or equal to':
    case '>=':
      return order >= 0;
    case 'less than or equal to':
    case '<=':
      return order <= 0;
    case 'blank':
      return String(a) === '';
    case 'like':
      return new RegExp(
        `^${expected
          .replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
          .replace(/%/g, '.*')
          .replace(/_/g, '.')}$`,
        's',
      ).test(String(a));
    default:
      throw new Error(`Unknown comparator "${comparator}".`);
  }
}

/** The longest step message the agent protocol takes (`body.body.step.message` of a progress report); a longer one is cut. */
const MAX_STEP_MESSAGE = 65_535;

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A pipeline path as a component names it: with or without its suffix. */
function findPipeline(pipelines: Record<string, string>, name: string, suffix: string): string | undefined {
  const stripped = name.replace(/^\/+/, '');
  return [stripped, `${stripped}${suffix}`].find((candidate) => Object.hasOwn(pipelines, candidate));
}

type Outcome = { status: RunStatus; message: string };

class Run {
  readonly steps: Step[] = [];
  private readonly clock: () => Date;
  private readonly print: (line: string) => void;
  private warehouseOpened?: Promise<Warehouse>;
  /** Set once the run went past MAX_NESTING: why every later attempt to go deeper fails at once. */
  private runaway?: string;

  constructor(private readonly options: RunOptions) {
    this.clock = options.now ?? (() => new Date());
    this.print = options.print ?? (() => undefined);
  }

  private get signal(): AbortSignal {
    return this.options.signal;
  }

  private get services(): RunServices {
    return this.options.services ?? {};
  }

  warehouse(): Promise<Warehouse> {
    const open = this.services.warehouse;
    if (!open) return Promise.reject(new Error('This run has no warehouse.'));
    this.warehouseOpened ??= open();
    return this.warehouseOpened;
  }

  async closeWarehouse(): Promise<void> {
    if (this.warehouseOpened) await (await this.warehouseOpened.catch(() => undefined))?.close();
  }

  /**
   * The datasets SQL run on `warehouse` read and wrote, parsed with the warehouse's grammar; SQL the parser
   * cannot read reports none rather than a guess.
   */
  lineageOf(warehouse: Warehouse, sql: string): StepLineage | undefined {
    const lineage = sqlLineage(sql, {
      grammar: warehouse.sqlGrammar,
      namespace: warehouse.lineageNamespace,
      defaultDatabase: warehouse.defaultDatabase ?? 'main',
      defaultSchema: warehouse.defaultSchema,
    });
    return lineage && (lineage.inputs.length > 0 || lineage.outputs.length > 0) ? lineage : undefined;
  }

  /**
   * A transformation output's lineage: the tables its SQL reads and writes (parsed, as for any SQL), and on
   * the table written, each column's input columns as the compiler traced them through the components.
   */
  transformationLineage(warehouse: Warehouse, sql: string, output: CompiledOutput): StepLineage | undefined {
    const lineage = this.lineageOf(warehouse, sql);
    const traced = output.columnLineage;
    if (!lineage || !traced) return lineage;
    const name = (table: TableName) =>
      `${table.database ?? warehouse.defaultDatabase ?? 'main'}.${table.schema ?? warehouse.defaultSchema}.${table.table}`;
    const target = lineage.outputs.find((dataset) => dataset.name === name(traced.target));
    if (!target) return lineage;
    target.fields = Object.keys(traced.columns).map((column) => ({ name: column }));
    target.columnLineage = Object.fromEntries(
      Object.entries(traced.columns).map(([column, origins]) => [
        column,
        origins.map((origin) => ({ namespace: warehouse.lineageNamespace, name: name(origin.table), field: origin.field })),
      ]),
    );
    return lineage;
  }

  /** Runs `work` as one reported step; answers whether it succeeded. */
  async step(
    name: string,
    child: ChildOf | undefined,
    work: (step: Step) => Promise<WorkAnswer>,
    skipped = false,
  ): Promise<Step> {
    const step: Step = {
      index: (this.options.firstIndex ?? 0) + this.steps.length,
      name,
      status: 'RUNNING',
      startedAt: this.clock().toISOString(),
      ...(child !== undefined && { childPipeline: child.pipeline }),
      ...(child?.parentStep !== undefined && { parentStep: child.parentStep }),
    };
    this.steps.push(step);
    await this.options.onStep?.({ ...step });
    if (skipped) {
      step.status = 'SKIPPED';
      step.message = 'The component is marked skipped.';
    } else {
      try {
        // Stopped while its start was reported (a cancel, or the server ended the delivery): the step does nothing.
        this.signal.throwIfAborted();
        const answer = await work(step);
        this.signal.throwIfAborted();
        step.status = 'SUCCESS';
        const message = typeof answer === 'object' ? answer.message : answer;
        if (message !== undefined) step.message = message;
        if (typeof answer === 'object' && answer.lineage) step.lineage = answer.lineage;
        if (typeof answer === 'object' && answer.rowsWritten !== undefined) step.rowsWritten = answer.rowsWritten;
      } catch (error) {
        if (this.signal.aborted) {
          step.status = 'CANCELLED';
          step.message = 'Cancelled while running.';
        } else {
          step.status = 'FAILED';
          step.message = messageOf(error);
        }
      }
    }
    step.finishedAt = this.clock().toISOString();
    // The agent protocol takes a step message of at most MAX_STEP_MESSAGE characters.
    if (step.message !== undefined && step.message.length > MAX_STEP_MESSAGE) {
      step.message = `${step.message.slice(0, MAX_STEP_MESSAGE - 1)}…`;
    }
    await this.options.onStep?.({ ...step });
    return step;
  }

  /** Walks `pipeline` from its start component. */
  async walk(pipeline: Pipeline, scope: Scope, child: ChildOf | undefined): Promise<Outcome> {
    const components = [...pipeline.components.values()];
    const start = components.find((component) => component.type === 'start')!;
    // An `and` runs once every component with a transition to it has arrived there.
    const predecessors = new Map<string, Set<string>>();
    for (const component of components) {
      const t = component.transitions;
      for (const target of [...t.success, ...t.failure, ...t.unconditional, ...t.true, ...t.false]) {
        if (!predecessors.has(target)) predecessors.set(target, new Set());
        predecessors.get(target)!.add(component.name);
      }
    }
    const arrivals = new Map<string, Set<string>>();
    const seen = new Set<string>([start.name]);
    let unhandledFailure: string | undefined;
    /** Set by the first end component reached (or a cancel): nothing more is started after it. */
    let ended: Outcome | undefined;
    const cancelled: Outcome = { status: 'CANCELLED', message: 'The run was cancelled.' };
    // Branches run at once: each component starts as soon as a transition leads to it (an `and` once every
    // component leading to it has arrived), whatever else is running.
    const running = new Set<Promise<void>>();
    let broken: { error: unknown } | undefined;
    const launch = (component: Component) => {
      const task: Promise<void> = visit(component)
        .catch((error: unknown) => void (broken ??= { error }))
        .finally(() => running.delete(task));
      running.add(task);
    };
    const visit = async (component: Component): Promise<void> => {
      if (ended) return;
      if (this.signal.aborted) {
        ended = cancelled;
        return;
      }
      let branch: boolean | undefined;
      const step = await this.step(
        component.name,
        child,
        async (step) => {
          const answer = await this.execute(component, pipeline, scope, child, step);
          if (typeof answer === 'object') branch = answer.branch;
          return answer;
        },
        component.skipped,
      );
      if (step.status === 'CANCELLED') {
        ended ??= cancelled;
        return;
      }
      const ends = !component.skipped && (component.type === 'end-success' || component.type === 'end-failure');
      if (ends && component.type === 'end-success') ended ??= { status: 'SUCCESS', message: `Ended at "${component.name}".` };
      if (ends) ended ??= { status: 'FAILED', message: `Ended at "${component.name}".` };
      if (ended) return;
      const succeeded = step.status !== 'FAILED';
      const { success, failure, unconditional } = component.transitions;
      const next =
        branch !== undefined
          ? [...(branch ? component.transitions.true : component.transitions.false), ...unconditional]
          : [...(succeeded ? success : failure), ...unconditional];
      if (!succeeded && next.length === 0) unhandledFailure ??= `"${component.name}" failed: ${step.message}`;
      for (const target of next) {
        const targetComponent = pipeline.components.get(target)!;
        if (targetComponent.type === 'and') {
          const arrived = arrivals.get(target) ?? new Set<string>();
          arrived.add(component.name);
          arrivals.set(target, arrived);
          if (arrived.size < (predecessors.get(target)?.size ?? 0)) continue;
        }
        if (seen.has(target)) continue;
        seen.add(target);
        launch(targetComponent);
      }
    };
    launch(start);
    // Every branch runs to its end (one reaching an end component starts nothing more, but what runs finishes).
    while (running.size > 0) await Promise.all([...running]);
    if (broken) throw broken.error;
    if (this.signal.aborted) return cancelled;
    if (ended) return ended;
    if (unhandledFailure !== undefined) return { status: 'FAILED', message: unhandledFailure };
    return { status: 'SUCCESS', message: 'The pipeline ran to its end.' };
  }

  /** Runs one component; answers its step's message (and `if`'s branch), or throws to fail the step. */
  private async execute(
    component: Component,
    pipeline: Pipeline,
    scope: Scope,
    child: ChildOf | undefined,
    step: Step,
  ): Promise<string | undefined | { message: string; branch?: boolean; lineage?: StepLineage; rowsWritten?: number }> {
    const p = component.parameters;
    const text = (name: string) => substitute(p[name], scope.values());
    const signal = this.signal;
    switch (component.type) {
      case 'start':
      case 'end-success':
      case 'end-failure':
      case 'and':
      case 'or':
        return undefined;
      case 'print-variables': {
        const variables = scope.values();
        const prefix = substitute(p.prefixText ?? '', variables);
        const listed = rowsOf(p.variablesToPrint).map((row) => String(row[0]));
        const lines = (listed.length > 0 ? listed : Object.keys(variables).sort()).map((name) => {
          if (!scope.has(name)) throw new Error(`Variable "${name}" is not defined.`);
          const value = scope.get(name);
          return `${prefix}${name}=${Array.isArray(value) ? JSON.stringify(value) : value}`;
        });
        for (const line of lines) this.print(line);
        return lines.join('\n');
      }
      case 'wait': {
        const seconds = Number(text('seconds'));
        if (!Number.isFinite(seconds) || seconds < 0 || seconds > 86_400) {
          throw new Error('wait needs a parameter "seconds" from 0 to 86400.');
        }
        await sleep(seconds * 1000, signal);
        return `waited ${seconds} s`;
      }
      case 'assert-scalar-variables': {
        const assertions = rowsOf(p.assertions);
        if (assertions.length === 0)
          throw new Error('assert-scalar-variables needs "assertions": rows of [name, comparator, value].');
        const failures: string[] = [];
        for (const [name, comparator, expected] of assertions) {
          const compare = COMPARATORS.get(String(comparator));
          if (!compare) throw new Error(`Unknown comparator "${String(comparator)}"; use ${[...COMPARATORS.keys()].join(' ')}.`);
          const key = String(name);
          const actual = scope.get(key);
          if (!scope.has(key)) failures.push(`${key} is not defined`);
          else if (Array.isArray(actual)) failures.push(`${key} is a grid`);
          else if (!compare(actual!, substitute(expected, scope.values()))) {
            failures.push(`${key} is ${actual}, expected ${String(comparator)} ${String(expected)}`);
          }
        }
        if (failures.length > 0) throw new Error(`Assertion failed: ${failures.join('; ')}.`);
        return `${assertions.length} assertion(s) held`;
      }
      case 'sql-executor': {
        const script = text('sqlScript');
        if (script.trim() === '') throw new Error('sql-executor needs "sqlScript".');
        const warehouse = await this.warehouse();
        const { rowsWritten } = await warehouse.run(script, signal);
        return { message: 'The SQL ran.', lineage: this.lineageOf(warehouse, script), rowsWritten };
      }
      case 'query-to-scalar': {
        const query = text('query');
        const mapping = rowsOf(p.scalarVariableMapping);
        if (query.trim() === '') throw new Error('query-to-scalar needs "query".');
        if (mapping.length === 0) throw new Error('query-to-scalar needs "scalarVariableMapping": rows of [variable, column].');
        const { columns, rows } = await (await this.warehouse()).query(query, signal);
        if (rows.length === 0) throw new Error('The query answered no rows.');
        const set: string[] = [];
        for (const [variable, column] of mapping) {
          const name = String(variable);
          const wanted = String(column);
          const found = columns.find((c) => c === wanted) ?? columns.find((c) => c.toLowerCase() === wanted.toLowerCase());
          if (found === undefined) throw new Error(`The query has no column "${wanted}" (it has ${columns.join(', ')}).`);
          if (!scope.has(name) && !Object.hasOwn(pipeline.variables, name)) throw new Error(`Variable "${name}" is not defined.`);
          scope.set(name, rows[0][found]);
          set.push(`${name}=${scope.get(name)}`);
        }
        return { message: set.join(', '), lineage: this.lineageOf(await this.warehouse(), query) };
      }
      case 'create-table-v2':
      case 'create-table':
        return this.createTable(component, scope);
      case 'truncate-table': {
        const warehouse = await this.warehouse();
        const names = listOf(p.tablesToTruncate ?? p.targetTable ?? p.tableName).map((name) => substitute(name, scope.values()));
        if (names.length === 0) throw new Error('truncate-table needs "tablesToTruncate".');
        for (const name of names) {
          await warehouse.run(
            `DELETE FROM ${qualifiedName(warehouse.dialect, this.tableName(component, scope, warehouse, name))}`,
            signal,
          );
        }
        return `${names.length} table(s) truncated`;
      }
      case 'if': {
        const conditions = rowsOf(p.condition ?? p.conditions);
        if (conditions.length === 0) throw new Error('if needs "condition": rows of [variable, Is|Not, comparator, value].');
        const any = String(p.combineConditions ?? p.combineCondition ?? 'And').toLowerCase() === 'or';
        const results = conditions.map(([variable, qualifier, comparator, value]) => {
          const name = String(variable);
          if (!scope.has(name)) throw new Error(`Variable "${name}" is not defined.`);
          const actual = scope.get(name);
          if (Array.isArray(actual)) throw new Error(`Variable "${name}" is a grid.`);
          const holds = compareNamed(actual, String(comparator ?? 'Equal to'), substitute(value ?? '', scope.values()));
          return String(qualifier ?? 'Is').toLowerCase() === 'not' ? !holds : holds;
        });
        const branch = any ? results.some(Boolean) : results.every(Boolean);
        return { message: `The condition is ${branch}.`, branch };
      }
      case 'fixed-iterator':
      case 'grid-iterator':
      case 'table-iterator':
        return this.iterate(component, pipeline, scope, child);
      case 'retry':
        return this.retry(component, pipeline, scope, child);
      case 'run-orchestration':
        return this.runChildOrchestration(component, scope, step);
      case 'run-transformation':
        return this.runChildTransformation(component, scope, step);
      case 'python-script':
      case 'bash-script':
        return this.script(component, scope);
      default:
        throw new Error(`Component type "${component.type}" is not supported by the reference agent.`);
    }
  }

  private tableName(component: Component, scope: Scope, warehouse: Warehouse, table: string): TableName {
    const part = (name: string, fallback: string | undefined) => {
      const value = substitute(component.parameters[name] ?? '', scope.values());
      return value === '' || value === ENVIRONMENT_DEFAULT ? fallback : value;
    };
    return { database: part('database', warehouse.defaultDatabase), schema: part('schema', warehouse.defaultSchema), table };
  }

  private async createTable(component: Component, scope: Scope): Promise<string> {
    const p = component.parameters;
    const warehouse = await this.warehouse();
    const name = substitute(p.newTableName ?? p.tableName ?? p.table ?? '', scope.values());
    if (name === '') throw new Error(`${component.type} needs "newTableName".`);
    const columns = rowsOf(p.columns).map((row) => row.map((cell) => substitute(cell, scope.values())));
    if (columns.length === 0)
      throw new Error(`${component.type} needs "columns": rows of [name, type, size, precision, default, not null, unique].`);
    const q = (n: string) => warehouse.quoteIdentifier(n);
    const definitions = columns.map(([column, type, size, precision, defaultValue, notNull, unique]) => {
      const sqlType = warehouse.dialect.typeName(
        type ?? 'VARCHAR',
        size ? Number(size) : undefined,
        precision ? Number(precision) : undefined,
      );
      return [
        q(column),
        sqlType,
        defaultValue ? `DEFAULT ${warehouse.quoteLiteral(defaultValue)}` : '',
        yes(notNull) ? 'NOT NULL' : '',
        yes(unique) ? 'UNIQUE' : '',
      ]
        .filter(Boolean)
        .join(' ');
    });
    const table = qualifiedName(warehouse.dialect, this.tableName(component, scope, warehouse, name));
    const method = String(p.createMethod ?? 'Create').toLowerCase();
    const body = `(${definitions.join(', ')})`;
    if (method === 'replace') {
      await warehouse.run(`DROP TABLE IF EXISTS ${table}; CREATE TABLE ${table} ${body}`, this.signal);
    } else if (method === 'create if not exists') {
      await warehouse.run(`CREATE TABLE IF NOT EXISTS ${table} ${body}`, this.signal);
    } else await warehouse.run(`CREATE TABLE ${table} ${body}`, this.signal);
    return `Table ${name} created.`;
  }

  /** The values each iteration gets: a list of {variable: value}. */
  private async iterations(component: Component, pipeline: Pipeline, scope: Scope): Promise<Record<string, unknown>[]> {
    const p = component.parameters;
    if (component.type === 'fixed-iterator') {
      const variables = listOf(p.variablesToIterate);
      if (variables.length === 0) throw new Error('fixed-iterator needs "variablesToIterate".');
      return rowsOf(p.iterationValues).map((row) =>
        Object.fromEntries(variables.map((name, index) => [name, substitute(row[index] ?? '', scope.values())])),
      );
    }
    if (component.type === 'grid-iterator') {
      const grid = String(p.gridVariable ?? '');
      const rows = scope.get(grid);
      if (!Array.isArray(rows)) throw new Error(`grid-iterator: "${grid}" is not a grid variable of the run.`);
      const columns = Object.hasOwn(pipeline.variables, grid) ? (pipeline.variables[grid].columns ?? []) : [];
      const mapping = rowsOf(p.gridIteratorVariableMapping);
      if (mapping.length === 0)
        throw new Error('grid-iterator needs "gridIteratorVariableMapping": rows of [grid column, variable].');
      return rows.map((row) =>
        Object.fromEntries(
          mapping.map(([column, variable]) => {
            const named = columns.indexOf(String(column));
            const index = named >= 0 ? named : Number(column);
            if (!Number.isInteger(index) || index < 0)
              throw new Error(`grid-iterator: the grid has no column "${String(column)}".`);
            return [String(variable), row[index]];
          }),
        ),
      );
    }
    // table-iterator: a row of the table per iteration, columns to variables.
    const warehouse = await this.warehouse();
    const table = substitute(p.targetTable ?? p.tableName ?? '', scope.values());
    if (table === '') throw new Error('table-iterator needs "targetTable".');
    const mapping = rowsOf(p.columnMapping);
    if (mapping.length === 0) throw new Error('table-iterator needs "columnMapping": rows of [column, variable].');
    const order = rowsOf(p.orderBy).map(
      ([column, direction]) =>
        `${warehouse.quoteIdentifier(String(column))} ${
          String(direction ?? '')
            .toLowerCase()
            .startsWith('desc')
            ? 'DESC'
            : 'ASC'
        }`,
    );
    const { rows } = await warehouse.query(
      `SELECT ${mapping.map(([column]) => warehouse.quoteIdentifier(String(column))).join(', ')} FROM ${qualifiedName(
        warehouse.dialect,
        this.tableName(component, scope, warehouse, table),
      )}${order.length > 0 ? ` ORDER BY ${order.join(', ')}` : ''}`,
      this.signal,
    );
    return rows.map((row) => Object.fromEntries(mapping.map(([column, variable]) => [String(variable), row[String(column)]])));
  }

  /** Refuses to go one level deeper than MAX_NESTING (`frame` the level), naming the chain. */
  private nest(scope: Scope, frame: string): void {
    if (this.runaway !== undefined) throw new Error(this.runaway);
    if (scope.nesting.length >= MAX_NESTING) {
      this.runaway = `Iterators, retries and child pipelines run within each other more than ${MAX_NESTING} levels deep; the run stops going deeper: ${[...scope.nesting, frame].join(' → ')}`;
      throw new Error(this.runaway);
    }
  }

  private attached(component: Component, pipeline: Pipeline): Component {
    const target = component.iterationTarget ?? (component.parameters.iterationTarget as string | undefined);
    const found = target === undefined ? undefined : pipeline.components.get(String(target));
    if (!found) throw new Error(`${component.type} "${component.name}" has no component attached (iterationTarget).`);
    return found;
  }

  /** Runs the attached component once per value, sequentially or up to a bound at once; each run is a step. */
  private async iterate(component: Component, pipeline: Pipeline, scope: Scope, child: ChildOf | undefined): Promise<string> {
    const target = this.attached(component, pipeline);
    const frame = `${component.name}${child ? ` (${child.pipeline})` : ''}`;
    this.nest(scope, frame);
    const values = await this.iterations(component, pipeline, scope);
    const concurrent = String(component.parameters.concurrency ?? 'Sequential').toLowerCase() === 'concurrent';
    const bound = concurrent
      ? Math.min(MAX_CONCURRENCY, Math.max(1, Number(component.parameters.maxConcurrency) || DEFAULT_CONCURRENCY))
      : 1;
    const breakOnFailure = yes(component.parameters.breakOnFailure);
    let failed = 0;
    let next = 0;
    let stop = false;
    const worker = async () => {
      while (!stop && next < values.length && !this.signal.aborted) {
        const index = next++;
        const iteration = scope.copy(frame);
        for (const [name, value] of Object.entries(values[index])) iteration.set(name, value);
        const step = await this.step(`${target.name}`, child, async (running) => {
          const answer = await this.execute(target, pipeline, iteration, child, running);
          const said = typeof answer === 'object' ? answer.message : answer;
          const described = Object.entries(values[index])
            .map(([name, value]) => `${name}=${String(value)}`)
            .join(', ');
          return {
            message: `iteration ${index + 1} (${described})${said ? `: ${said}` : ''}`,
            lineage: typeof answer === 'object' ? answer.lineage : undefined,
            rowsWritten: typeof answer === 'object' ? answer.rowsWritten : undefined,
          };
        });
        if (step.status === 'FAILED') {
          failed += 1;
          if (breakOnFailure) stop = true;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(bound, Math.max(values.length, 1)) }, worker));
    this.signal.throwIfAborted();
    if (failed > 0) throw new Error(`${failed} of ${values.length} iteration(s) failed.`);
    return `${values.length} iteration(s) ran ${concurrent ? `concurrently (at most ${bound} at once)` : 'one after another'}.`;
  }

  private async retry(component: Component, pipeline: Pipeline, scope: Scope, child: ChildOf | undefined): Promise<string> {
    const target = this.attached(component, pipeline);
    const frame = `${component.name}${child ? ` (${child.pipeline})` : ''}`;
    this.nest(scope, frame);
    const within = scope.within(frame);
    const retries = Math.max(
      0,
      Math.min(100, Number(substitute(component.parameters.numberOfRetries ?? 1, scope.values())) || 0),
    );
    const delay = Math.max(0, Number(substitute(component.parameters.retryDelay ?? 0, scope.values())) || 0);
    for (let attempt = 0; attempt <= retries; attempt += 1) {
      if (attempt > 0 && delay > 0) await sleep(delay * 1000, this.signal);
      const step = await this.step(target.name, child, async (running) => {
        return this.execute(target, pipeline, within, child, running);
      });
      if (step.status === 'SUCCESS') return `Succeeded on attempt ${attempt + 1}.`;
      this.signal.throwIfAborted();
    }
    throw new Error(`Failed after ${retries + 1} attempt(s).`);
  }

  /** The child's variables: its defaults, the project's, then the parent's `setScalarVariables`/`setGridVariables`. */
  private childScope(component: Component, child: Pipeline, path: string, scope: Scope): Scope {
    const values = variablesOf(child, this.services.projectVariables ?? {});
    const given = (parameter: string, grid: boolean) => {
      for (const row of rowsOf(component.parameters[parameter])) {
        const name = String(row[0]);
        if (!Object.hasOwn(child.variables, name)) throw new Error(`${parameter}: "${path}" has no variable "${name}".`);
        if (child.variables[name].visibility === 'PRIVATE') {
          throw new Error(`${parameter}: variable "${name}" of "${path}" is PRIVATE; a parent may set only PUBLIC variables.`);
        }
        if (grid) {
          const source = row[1];
          const rows = Array.isArray(source) ? rowsOf(source) : scope.get(String(source));
          if (!Array.isArray(rows)) throw new Error(`${parameter}: "${String(source)}" is not a grid.`);
          values[name] = rows as VariableValue[][];
        } else {
          const value = substitute(row[1] ?? '', scope.values());
          values[name] = child.variables[name].type === 'NUMBER' ? Number(value) : value;
        }
      }
    };
    given('setScalarVariables', false);
    given('setGridVariables', true);
    return new Scope(values, child.variables, undefined, [...scope.nesting, path]);
  }

  private childFile(component: Component, parameter: string, suffix: string, scope: Scope): { path: string; pipeline: Pipeline } {
    const name = substitute(component.parameters[parameter] ?? '', scope.values());
    if (name === '') throw new Error(`${component.type} needs "${parameter}".`);
    const pipelines = this.services.pipelines ?? {};
    const path = findPipeline(pipelines, name, suffix);
    if (path === undefined) throw new Error(`${parameter}: "${name}" is not a pipeline of this version.`);
    return { path, pipeline: parsePipelineFile(pipelines[path]) };
  }

  /**
   * The step running a child pipeline names it (`runsPipeline`), reported again as running once the path is
   * known: the server starts the child's run in lineage with it, and ends that run when the step ends. The
   * child's steps name this step (`parentStep`).
   */
  private async runs(invoking: Step, path: string): Promise<ChildOf> {
    invoking.runsPipeline = path;
    await this.options.onStep?.({ ...invoking });
    return { pipeline: path, parentStep: invoking.index };
  }

  private async runChildOrchestration(component: Component, scope: Scope, invoking: Step): Promise<string> {
    const { path, pipeline } = this.childFile(component, 'orchestrationJob', PIPELINE_SUFFIXES.orchestration, scope);
    if (pipeline.kind !== 'orchestration') throw new Error(`orchestrationJob: "${path}" is not an orchestration pipeline.`);
    this.nest(scope, path);
    const childScope = this.childScope(component, pipeline, path, scope);
    const outcome = await this.walk(pipeline, childScope, await this.runs(invoking, path));
    if (outcome.status === 'CANCELLED') this.signal.throwIfAborted();
    if (outcome.status !== 'SUCCESS') throw new Error(`Child pipeline "${path}" failed: ${outcome.message}`);
    return `Child pipeline "${path}" succeeded.`;
  }

  private async runChildTransformation(component: Component, scope: Scope, invoking: Step): Promise<string> {
    const { path, pipeline } = this.childFile(component, 'transformationJob', PIPELINE_SUFFIXES.transformation, scope);
    if (pipeline.kind !== 'transformation') throw new Error(`transformationJob: "${path}" is not a transformation pipeline.`);
    const warehouse = await this.warehouse();
    const childScope = this.childScope(component, pipeline, path, scope);
    const child = await this.runs(invoking, path);
    const outputs = compileTransformation(pipeline, {
      dialect: warehouse.dialect,
      variables: childScope.values(),
      defaultDatabase: warehouse.defaultDatabase,
      defaultSchema: warehouse.defaultSchema,
    });
    let failed: string | undefined;
    for (const output of outputs) {
      const step = await this.step(output.component, child, async () => {
        // One script: where the warehouse runs a script as one transaction (PostgreSQL), a truncate or
        // drop and the write that follows it happen together or not at all.
        const script = output.statements.join(';\n');
        const { rowsWritten } = await warehouse.run(script, this.signal);
        return {
          message: `${output.type} wrote ${output.statements.length} statement(s).`,
          lineage: this.transformationLineage(warehouse, script, output),
          rowsWritten,
        };
      });
      if (step.status === 'CANCELLED') this.signal.throwIfAborted();
      if (step.status === 'FAILED') {
        failed = `"${output.component}": ${step.message}`;
        break;
      }
    }
    if (failed) throw new Error(`Transformation "${path}" failed at ${failed}`);
    return `Transformation "${path}" wrote ${outputs.length} output(s).`;
  }

  private async script(component: Component, scope: Scope): Promise<string> {
    const runScript = this.services.runScript;
    if (!runScript) throw new Error(`${component.type}: scripts are not allowed on this agent (start it with scripts allowed).`);
    const script = String(component.parameters.script ?? '');
    if (script.trim() === '') throw new Error(`${component.type} needs "script".`);
    const seconds = Number(component.parameters.timeout ?? 3600);
    const timeoutMs = Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 3_600_000;
    const env: Record<string, string> = {};
    for (const [name, value] of Object.entries(scope.values())) {
      if (!Array.isArray(value) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) env[name] = String(value);
    }
    const result = await runScript(component.type === 'python-script' ? 'python' : 'bash', script, env, timeoutMs, this.signal);
    this.signal.throwIfAborted();
    const output = result.output.length > SCRIPT_OUTPUT_LIMIT ? `…${result.output.slice(-SCRIPT_OUTPUT_LIMIT)}` : result.output;
    if (result.timedOut) throw new Error(`The script ran past its timeout of ${timeoutMs / 1000} s and was stopped.\n${output}`);
    if (result.exitCode !== 0) throw new Error(`The script exited with ${result.exitCode}.\n${output}`);
    return output;
  }
}

/**
 * Walks the pipeline from its start component. A component that succeeds follows its success and
 * unconditional transitions, one that fails its failure and unconditional ones; `if` follows true or
 * false. The targets of a component run at once, as branches (started in the order listed), each
 * component at most once: the first arrival runs it (`or` and any other), an `and` waits for every
 * component leading to it. end-success and end-failure end the run: nothing more starts, what runs in other
 * branches finishes. A failed component with nowhere to go fails the run; otherwise the run succeeds when
 * every branch has run out. A cancel (the signal) stops the run and cancels what is in flight (a wait, a
 * warehouse statement, a script).
 */
export async function runPipeline(pipeline: Pipeline, options: RunOptions): Promise<RunOutcome> {
  const run = new Run(options);
  try {
    const child = options.childPipeline === undefined ? undefined : { pipeline: options.childPipeline };
    const outcome = await run.walk(pipeline, new Scope(options.variables, pipeline.variables), child);
    return { ...outcome, steps: run.steps };
  } finally {
    await run.closeWarehouse();
  }
}

/**
 * The variables a run sees: the pipeline's own defaults, then what the server resolved for the run
 * (request > environment override > project default), which wins. An object without a prototype: a
 * variable named `__proto__` is a variable like any other.
 */
export function variablesOf(pipeline: Pipeline, resolved: VariableValues): VariableValues {
  const variables = Object.create(null) as VariableValues;
  for (const [name, declared] of Object.entries(pipeline.variables)) {
    const value = declared.defaultValue;
    if (typeof value === 'string' || typeof value === 'number') variables[name] = value;
    else if (Array.isArray(value)) variables[name] = rowsOf(value) as VariableValue[][];
  }
  for (const [name, value] of Object.entries(resolved)) variables[name] = value;
  return variables;
}
