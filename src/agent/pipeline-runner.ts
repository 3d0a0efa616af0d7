/**
 * Runs an orchestration pipeline (`.orch.yaml`) the way the reference agent does: a graph of components
 * joined by success, failure and unconditional transitions, walked from the start component. Pure: the
 * caller gives the parsed file, the resolved variables, a signal and where steps go; nothing here does I/O
 * but the wait. The supported subset is documented in the README (Executions).
 */

import type { Component, Pipeline, VariableValue } from '../contract/pipeline-file.ts';

export type StepStatus = 'RUNNING' | 'SUCCESS' | 'FAILED' | 'SKIPPED' | 'CANCELLED';

export interface Step {
  /** Position in the run, from 0: a step is reported when it starts and again when it ends. */
  index: number;
  name: string;
  status: StepStatus;
  startedAt: string;
  finishedAt?: string;
  message?: string;
  /** The pipeline file the step belongs to, when a run covers several (tests). */
  childPipeline?: string;
}

export type RunStatus = 'SUCCESS' | 'FAILED' | 'CANCELLED';

export interface RunOutcome {
  status: RunStatus;
  message: string;
  steps: Step[];
}

export interface RunOptions {
  variables: Record<string, VariableValue>;
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
}

/**
 * Whether the run has a variable `name`. Own members only: names come from users, and `constructor` or
 * `toString` are members every object inherits.
 */
function defined(variables: Record<string, VariableValue>, name: string): boolean {
  return Object.hasOwn(variables, name);
}

/** `${name}` references in a parameter replaced by the variables' values; an unknown one is an error. */
function resolveText(value: unknown, variables: Record<string, VariableValue>): string {
  return String(value ?? '').replace(/\$\{([A-Za-z_$][A-Za-z0-9_$]*)\}/g, (_, name: string) => {
    if (!defined(variables, name)) throw new Error(`Variable "${name}" is not defined.`);
    return String(variables[name]);
  });
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

/** The rows of a grid parameter: `[[a, b], [c, d]]`, or a list of single values. */
function rows(value: unknown): unknown[][] {
  if (!Array.isArray(value)) return [];
  return value.map((row) => (Array.isArray(row) ? row : [row]));
}

type ComponentRun = (
  component: Component,
  context: { variables: Record<string, VariableValue>; signal: AbortSignal; print: (line: string) => void },
) => Promise<string | undefined>;

/**
 * The control components the reference agent runs. Each answers a message, or throws to fail its step.
 * end-success and end-failure are handled by the walk itself.
 */
const CONTROL_COMPONENTS = new Map<string, ComponentRun>(
  Object.entries({
    start: async () => undefined,
    'print-variables': async (component, { variables, print }) => {
      const prefix = resolveText(component.parameters.prefixText ?? '', variables);
      const listed = rows(component.parameters.variablesToPrint).map((row) => String(row[0]));
      const lines = (listed.length > 0 ? listed : Object.keys(variables).sort()).map((name) => {
        if (!defined(variables, name)) throw new Error(`Variable "${name}" is not defined.`);
        return `${prefix}${name}=${variables[name]}`;
      });
      for (const line of lines) print(line);
      return lines.join('\n');
    },
    wait: async (component, { variables, signal }) => {
      const seconds = Number(resolveText(component.parameters.seconds, variables));
      if (!Number.isFinite(seconds) || seconds < 0 || seconds > 86_400) {
        throw new Error('wait needs a parameter "seconds" from 0 to 86400.');
      }
      await sleep(seconds * 1000, signal);
      return `waited ${seconds} s`;
    },
    'assert-scalar-variables': async (component, { variables }) => {
      const assertions = rows(component.parameters.assertions);
      if (assertions.length === 0)
        throw new Error('assert-scalar-variables needs "assertions": rows of [name, comparator, value].');
      const failures: string[] = [];
      for (const [name, comparator, expected] of assertions) {
        const compare = COMPARATORS.get(String(comparator));
        if (!compare) throw new Error(`Unknown comparator "${String(comparator)}"; use ${[...COMPARATORS.keys()].join(' ')}.`);
        const key = String(name);
        if (!defined(variables, key)) failures.push(`${key} is not defined`);
        else if (!compare(variables[key], resolveText(expected, variables))) {
          failures.push(`${key} is ${variables[key]}, expected ${String(comparator)} ${String(expected)}`);
        }
      }
      if (failures.length > 0) throw new Error(`Assertion failed: ${failures.join('; ')}.`);
      return `${assertions.length} assertion(s) held`;
    },
  } satisfies Record<string, ComponentRun>),
);

export const SUPPORTED_COMPONENT_TYPES = [...CONTROL_COMPONENTS.keys(), 'end-success', 'end-failure'];

/**
 * Walks the pipeline from its start component. A component that succeeds follows its success and
 * unconditional transitions, one that fails its failure and unconditional ones; targets run in the order
 * listed, each component at most once (the first arrival runs it). end-success and end-failure end the run.
 * A failed component with nowhere to go fails the run; otherwise the run succeeds when the walk runs out.
 * A cancel (the signal) stops the run between steps and interrupts a wait.
 */
export async function runPipeline(pipeline: Pipeline, options: RunOptions): Promise<RunOutcome> {
  const clock = options.now ?? (() => new Date());
  const steps: Step[] = [];
  const print = options.print ?? (() => undefined);
  const record = async (step: Step) => {
    await options.onStep?.({ ...step });
  };
  const start = [...pipeline.components.values()].find((component) => component.type === 'start')!;
  const queue: Component[] = [start];
  const seen = new Set<string>([start.name]);
  let unhandledFailure: string | undefined;

  while (queue.length > 0) {
    const component = queue.shift()!;
    if (options.signal.aborted) return { status: 'CANCELLED', message: 'The run was cancelled.', steps };
    const step: Step = {
      index: (options.firstIndex ?? 0) + steps.length,
      name: component.name,
      status: 'RUNNING',
      startedAt: clock().toISOString(),
      ...(options.childPipeline !== undefined && { childPipeline: options.childPipeline }),
    };
    steps.push(step);
    await record(step);

    let succeeded = true;
    if (component.skipped) {
      step.status = 'SKIPPED';
      step.message = 'The component is marked skipped.';
    } else if (component.type === 'end-success' || component.type === 'end-failure') {
      step.status = 'SUCCESS';
    } else {
      const run = CONTROL_COMPONENTS.get(component.type);
      try {
        if (!run) throw new Error(`Component type "${component.type}" is not supported by the reference agent.`);
        const message = await run(component, { variables: options.variables, signal: options.signal, print });
        step.status = 'SUCCESS';
        if (message !== undefined) step.message = message;
      } catch (error) {
        if (options.signal.aborted) {
          step.status = 'CANCELLED';
          step.message = 'Cancelled while running.';
        } else {
          step.status = 'FAILED';
          step.message = error instanceof Error ? error.message : String(error);
          succeeded = false;
        }
      }
    }
    step.finishedAt = clock().toISOString();
    await record(step);

    if (step.status === 'CANCELLED') return { status: 'CANCELLED', message: 'The run was cancelled.', steps };
    if (component.type === 'end-success' && !component.skipped) {
      return { status: 'SUCCESS', message: `Ended at "${component.name}".`, steps };
    }
    if (component.type === 'end-failure' && !component.skipped) {
      return { status: 'FAILED', message: `Ended at "${component.name}".`, steps };
    }
    const { success, failure, unconditional } = component.transitions;
    const next = [...(succeeded ? success : failure), ...unconditional];
    if (!succeeded && next.length === 0) unhandledFailure ??= `"${component.name}" failed: ${step.message}`;
    for (const target of next) {
      if (seen.has(target)) continue;
      seen.add(target);
      queue.push(pipeline.components.get(target)!);
    }
  }
  if (unhandledFailure !== undefined) return { status: 'FAILED', message: unhandledFailure, steps };
  return { status: 'SUCCESS', message: 'The pipeline ran to its end.', steps };
}

/**
 * The variables a run sees: the pipeline's own defaults, then what the server resolved for the run
 * (request > environment override > project default), which wins. An object without a prototype: a
 * variable named `__proto__` is a variable like any other.
 */
export function variablesOf(pipeline: Pipeline, resolved: Record<string, VariableValue>): Record<string, VariableValue> {
  const variables = Object.create(null) as Record<string, VariableValue>;
  for (const [name, declared] of Object.entries(pipeline.variables)) {
    const value = declared.defaultValue;
    if (typeof value === 'string' || typeof value === 'number') variables[name] = value;
  }
  for (const [name, value] of Object.entries(resolved)) variables[name] = value;
  return variables;
}
