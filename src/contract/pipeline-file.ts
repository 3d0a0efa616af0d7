/**
 * The pipeline file model, shared by the server (which checks a file before a run starts) and the agents
 * (which run it): the real service's YAML. `type: "orchestration"` (control flow: each component's
 * `transitions`) or `type: "transformation"` (data flow: each component's `sources`), `pipeline.components`
 * keyed by name, each with `type` and `parameters`, and `pipeline.variables` with their metadata.
 * Pure: no I/O, no server or agent code.
 */
import { parseBoundedYaml, PIPELINE_YAML_BOUNDS } from './bounded-yaml.ts';

/**
 * The component types of an orchestration that the reference agent runs (src/agent/pipeline-runner.ts, whose
 * `execute` has a case for each; test/agent/orchestration-types.test.ts holds them to this list). Another
 * agent may run more: the review only warns of a type outside it.
 */
export const ORCHESTRATION_TYPES = [
  'start',
  'end-success',
  'end-failure',
  'and',
  'or',
  'print-variables',
  'wait',
  'assert-scalar-variables',
  'sql-executor',
  'query-to-scalar',
  'create-table-v2',
  'create-table',
  'truncate-table',
  'if',
  'fixed-iterator',
  'grid-iterator',
  'table-iterator',
  'retry',
  'run-orchestration',
  'run-transformation',
  'python-script',
  'bash-script',
] as const;

/** Pipeline file suffixes: the one place that names them. */
export const PIPELINE_SUFFIXES = {
  orchestration: '.orch.yaml',
  transformation: '.tran.yaml',
  /** A test pipeline is an orchestration pipeline whose name ends so. */
  test: '.test.orch.yaml',
} as const;

export type VariableValue = string | number;
/** A run's variables: scalars, and grids as rows. */
export type VariableValues = Record<string, VariableValue | VariableValue[][]>;

export interface Component {
  name: string;
  type: string;
  skipped: boolean;
  parameters: Record<string, unknown>;
  /** orchestration: successors by outcome (`if` goes to `true` or `false`). */
  transitions: { success: string[]; failure: string[]; unconditional: string[]; true: string[]; false: string[] };
  /** orchestration: the component an iterator or retry runs (attached to it, not reached by transitions). */
  iterationTarget?: string;
  /** transformation: the components whose rows flow in. */
  sources: string[];
}

export interface DeclaredVariable {
  type: string;
  scope: 'COPIED' | 'SHARED';
  visibility: 'PUBLIC' | 'PRIVATE';
  defaultValue?: unknown;
  /** GRID: the column names, in order. */
  columns?: string[];
}

export interface Pipeline {
  kind: 'orchestration' | 'transformation';
  components: Map<string, Component>;
  /** Variables the file declares, with their default values. */
  variables: Record<string, DeclaredVariable>;
}

/** A pipeline file that cannot be run as it is; `component`/`parameter` say where when known. */
export class PipelineFileError extends Error {
  constructor(
    message: string,
    readonly component?: string,
    readonly parameter?: string,
  ) {
    super(message);
  }
}

function names(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) return [String(value)];
  return value.map(String);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Reads a pipeline file (orchestration or transformation) into its graph, or PipelineFileError saying what is wrong. */
export function parsePipelineFile(text: string): Pipeline {
  const parsed = parseBoundedYaml(text, PIPELINE_YAML_BOUNDS);
  if ('refused' in parsed) throw new PipelineFileError(`The pipeline file is ${parsed.refused}.`);
  const document = parsed.value;
  if (!isRecord(document) || !isRecord(document.pipeline) || !isRecord(document.pipeline.components)) {
    throw new PipelineFileError('The pipeline file has no pipeline.components mapping.');
  }
  const kind = document.type ?? 'orchestration';
  if (kind !== 'orchestration' && kind !== 'transformation') {
    throw new PipelineFileError(`A pipeline file is of type "orchestration" or "transformation", not "${String(kind)}".`);
  }
  const components = new Map<string, Component>();
  for (const [name, raw] of Object.entries(document.pipeline.components)) {
    if (!isRecord(raw) || typeof raw.type !== 'string')
      throw new PipelineFileError(`Component "${name}" has no type.`, name, 'type');
    const transitions = isRecord(raw.transitions) ? raw.transitions : {};
    components.set(name, {
      name,
      type: raw.type,
      skipped: raw.skipped === true,
      // Without a prototype: a parameter the file leaves out reads undefined, never an inherited member.
      parameters: Object.assign(Object.create(null) as Record<string, unknown>, isRecord(raw.parameters) ? raw.parameters : {}),
      transitions: {
        success: names(transitions.success),
        failure: names(transitions.failure),
        unconditional: names(transitions.unconditional),
        true: names(transitions.true),
        false: names(transitions.false),
      },
      ...(typeof raw.iterationTarget === 'string' && { iterationTarget: raw.iterationTarget }),
      sources: names(raw.sources),
    });
  }
  // Keyed by names the file chooses (`__proto__` among them): an object without a prototype.
  const variables = Object.create(null) as Pipeline['variables'];
  if (isRecord(document.pipeline.variables)) {
    for (const [name, raw] of Object.entries(document.pipeline.variables)) {
      const metadata = isRecord(raw) && isRecord(raw.metadata) ? raw.metadata : {};
      const columns = isRecord(metadata.columns) ? Object.keys(metadata.columns) : undefined;
      variables[name] = {
        type: typeof metadata.type === 'string' ? metadata.type : 'TEXT',
        scope: metadata.scope === 'SHARED' ? 'SHARED' : 'COPIED',
        visibility: metadata.visibility === 'PRIVATE' ? 'PRIVATE' : 'PUBLIC',
        ...(isRecord(raw) && raw.defaultValue !== undefined && { defaultValue: raw.defaultValue }),
        ...(columns && { columns }),
      };
    }
  }
  const pipeline: Pipeline = { kind: kind as Pipeline['kind'], components, variables };
  if (pipeline.kind === 'orchestration') checkOrchestrationShape(pipeline);
  else checkTransformationShape(pipeline);
  return pipeline;
}

/** Reads an orchestration pipeline file (the kind a run starts from). */
export function parsePipeline(text: string): Pipeline {
  return orchestrationOnly(parsePipelineFile(text));
}

/** `pipeline` when it is an orchestration pipeline (the kind a run starts from); else PipelineFileError. */
export function orchestrationOnly(pipeline: Pipeline): Pipeline {
  if (pipeline.kind !== 'orchestration') {
    throw new PipelineFileError(`Only orchestration pipelines run; this file is of type "${pipeline.kind}".`);
  }
  return pipeline;
}

function checkOrchestrationShape(pipeline: Pipeline): void {
  const { components } = pipeline;
  for (const component of components.values()) {
    const { success, failure, unconditional, true: onTrue, false: onFalse } = component.transitions;
    for (const target of [...success, ...failure, ...unconditional, ...onTrue, ...onFalse]) {
      if (!components.has(target)) {
        throw new PipelineFileError(
          `Component "${component.name}" has a transition to "${target}", which does not exist.`,
          component.name,
          'transitions',
        );
      }
    }
    if (component.iterationTarget !== undefined && !components.has(component.iterationTarget)) {
      throw new PipelineFileError(
        `Component "${component.name}" iterates over "${component.iterationTarget}", which does not exist.`,
        component.name,
        'iterationTarget',
      );
    }
  }
  checkIterationCycles(pipeline);
  const starts = [...components.values()].filter((component) => component.type === 'start');
  if (starts.length !== 1) throw new PipelineFileError(`The pipeline needs one start component; it has ${starts.length}.`);
}

/** The component `component` runs as its attached one (an iterator's or retry's `iterationTarget`), if any. */
function attachedName(component: Component): string | undefined {
  const named = component.iterationTarget ?? component.parameters.iterationTarget;
  return typeof named === 'string' ? named : undefined;
}

/**
 * An iterator attached to itself, or iterators attached to each other in a ring, would run without end (each
 * run of one runs the next): refused, naming the component and its `iterationTarget`.
 */
function checkIterationCycles(pipeline: Pipeline): void {
  // Each component is attached to one at most, so the walks follow single links: linear with a memo.
  const clear = new Set<string>();
  for (const component of pipeline.components.values()) {
    const path: string[] = [];
    const onPath = new Set<string>();
    let at: string | undefined = component.name;
    while (at !== undefined && !clear.has(at) && !onPath.has(at)) {
      path.push(at);
      onPath.add(at);
      const current = pipeline.components.get(at);
      at = current === undefined ? undefined : attachedName(current);
    }
    if (at !== undefined && onPath.has(at)) {
      const ring = path.slice(path.indexOf(at));
      throw new PipelineFileError(
        ring.length === 1
          ? `Component "${at}" iterates over itself (iterationTarget), which would never end`
          : `Components iterate over each other in a cycle (iterationTarget): ${[...ring, at].map((name) => `"${name}"`).join(' → ')}; it would never end`,
        at,
        'iterationTarget',
      );
    }
    for (const name of path) clear.add(name);
  }
}

function checkTransformationShape(pipeline: Pipeline): void {
  const { components } = pipeline;
  for (const component of components.values()) {
    for (const source of component.sources) {
      if (!components.has(source)) {
        throw new PipelineFileError(
          `Component "${component.name}" reads from "${source}", which does not exist.`,
          component.name,
          'sources',
        );
      }
    }
  }
  // A cycle: a depth-first walk meeting a component still on its path.
  const state = new Map<string, 'open' | 'done'>();
  const visit = (name: string, path: string[]) => {
    if (state.get(name) === 'done') return;
    if (state.get(name) === 'open') {
      throw new PipelineFileError(`Components form a cycle: ${[...path, name].join(' → ')}.`, name, 'sources');
    }
    state.set(name, 'open');
    for (const source of components.get(name)!.sources) visit(source, [...path, name]);
    state.set(name, 'done');
  };
  for (const name of components.keys()) visit(name, []);
}
