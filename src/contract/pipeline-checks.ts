/**
 * Checks made when a run is started, from the artifact's files, so that a pipeline that cannot run is
 * refused with a 400 naming the component and the parameter rather than failing on the agent: unknown
 * transition targets, sources and attached components, cycles (of sources, and of pipelines running
 * each other), missing required parameters, child pipelines that are not in the artifact. Pure.
 */
import { parsePipelineFile, PIPELINE_SUFFIXES, PipelineFileError, type Component, type Pipeline } from './pipeline-file.ts';
import { REQUIRED_TRANSFORMATION_PARAMETERS } from './transformation.ts';

/** The parameters each orchestration component type cannot do without. */
export const REQUIRED_ORCHESTRATION_PARAMETERS: Record<string, string[]> = {
  'sql-executor': ['sqlScript'],
  'query-to-scalar': ['query', 'scalarVariableMapping'],
  'assert-scalar-variables': ['assertions'],
  'run-orchestration': ['orchestrationJob'],
  'run-transformation': ['transformationJob'],
  'fixed-iterator': ['variablesToIterate', 'iterationValues'],
  'grid-iterator': ['gridVariable', 'gridIteratorVariableMapping'],
  'table-iterator': ['targetTable', 'columnMapping'],
  if: ['condition'],
  'python-script': ['script'],
  'bash-script': ['script'],
  'create-table-v2': ['columns'],
};

const ATTACHING = new Set(['fixed-iterator', 'grid-iterator', 'table-iterator', 'retry']);

/** A violation naming where it is: `<file>: components.<name>.parameters.<parameter>: <what>`. */
export interface PipelineViolation {
  file: string;
  component?: string;
  parameter?: string;
  message: string;
}

export function describeViolation(v: PipelineViolation): string {
  const at = v.component === undefined ? '' : `components.${v.component}${v.parameter ? `.parameters.${v.parameter}` : ''}: `;
  return `${v.file}: ${at}${v.message}`;
}

function missing(value: unknown): boolean {
  return value === undefined || value === null || value === '' || (Array.isArray(value) && value.length === 0);
}

/** The child's file: its name as given, or with the kind's suffix, when the version has that path. */
function findFile(has: (path: string) => boolean, name: string, suffix: string): string | undefined {
  const stripped = name.replace(/^\/+/, '');
  return [stripped, `${stripped}${suffix}`].find(has);
}

/** The parameter naming the child pipeline a component type runs, and the suffix of that child's file. */
const CHILDREN: Record<string, { parameter: string; suffix: string }> = {
  'run-orchestration': { parameter: 'orchestrationJob', suffix: PIPELINE_SUFFIXES.orchestration },
  'run-transformation': { parameter: 'transformationJob', suffix: PIPELINE_SUFFIXES.transformation },
};

/** Whether the component names its child pipeline through a variable (resolved when the run gets there). */
function childThroughVariables(component: Component): boolean {
  const named = Object.hasOwn(CHILDREN, component.type) && component.parameters[CHILDREN[component.type].parameter];
  return typeof named === 'string' && named.includes('${');
}

/** The child pipeline a component runs: the parameter naming it, the name, and its file when the version has it. */
function childOf(component: Component, has: (path: string) => boolean) {
  const child = Object.hasOwn(CHILDREN, component.type) ? CHILDREN[component.type] : undefined;
  const named = child && component.parameters[child.parameter];
  if (!child || typeof named !== 'string' || named === '' || childThroughVariables(component)) return undefined;
  return { parameter: child.parameter, named, target: findFile(has, named, child.suffix) };
}

/**
 * `file` and every pipeline it runs, theirs, and so on (children named through variables are known only
 * when the run gets there); files that cannot be read are listed and not followed.
 */
export function pipelinesRunBy(file: string, files: Record<string, string>, parsed: ParsedFiles = new Map()): string[] {
  const seen = new Set<string>();
  const waiting = [file];
  while (waiting.length > 0) {
    const path = waiting.pop()!;
    if (seen.has(path) || !Object.hasOwn(files, path)) continue;
    seen.add(path);
    const pipeline = parsedFile(path, files, parsed);
    if (pipeline instanceof PipelineFileError) continue;
    for (const component of pipeline.components.values()) {
      const child = component.skipped ? undefined : childOf(component, (path) => Object.hasOwn(files, path));
      if (child?.target !== undefined) waiting.push(child.target);
    }
  }
  return [...seen];
}

/**
 * The child pipelines the pipeline at `path` (among `files`) runs, as paths among `paths`, and whether it
 * names one through a variable (then the run may reach any pipeline of the version). A file that cannot be
 * read runs none.
 */
export function childPipelines(
  path: string,
  files: Record<string, string>,
  paths: ReadonlySet<string>,
  parsed: ParsedFiles = new Map(),
): { paths: string[]; throughVariables: boolean } {
  const pipeline = parsedFile(path, files, parsed);
  if (pipeline instanceof PipelineFileError) return { paths: [], throughVariables: false };
  const children: string[] = [];
  let throughVariables = false;
  for (const component of pipeline.components.values()) {
    if (component.skipped) continue;
    if (childThroughVariables(component)) throughVariables = true;
    const child = childOf(component, (path) => paths.has(path));
    if (child?.target !== undefined) children.push(child.target);
  }
  return { paths: children, throughVariables };
}

/**
 * Files parsed once by path: the pipeline, or why it cannot be read. One map is handed through everything
 * that reads the same `files` (a run start: the files it sends, its checks, the review), so each file is
 * parsed once; its entries are read, never changed.
 */
export type ParsedFiles = Map<string, Pipeline | PipelineFileError>;

/** The file at `path` of `files`, parsed the first time it is asked for and kept in `parsed`. */
export function parsedFile(path: string, files: Record<string, string>, parsed: ParsedFiles): Pipeline | PipelineFileError {
  let entry = parsed.get(path);
  if (entry === undefined) {
    try {
      entry = parsePipelineFile(files[path]);
    } catch (error) {
      if (!(error instanceof PipelineFileError)) throw error;
      entry = error;
    }
    parsed.set(path, entry);
  }
  return entry;
}

/**
 * Every violation of `file` and the pipelines it runs. `files` are the artifact's pipeline files by path.
 * A file that cannot be parsed at all throws PipelineFileError (the caller's 422); everything else is
 * answered as violations (the caller's 400).
 */
export function checkPipeline(file: string, files: Record<string, string>, parsed: ParsedFiles = new Map()): PipelineViolation[] {
  const top = parsedFile(file, files, parsed);
  if (top instanceof PipelineFileError && top.component === undefined) throw top;
  return walkPipelines([file], files, parsed, true);
}

/**
 * The violations of every file among `roots` and the pipelines they run, files that cannot be read left
 * out (the caller reports them as they are): one walk over them all, each file checked once.
 */
export function checkPipelines(
  roots: string[],
  files: Record<string, string>,
  parsed: ParsedFiles = new Map(),
): PipelineViolation[] {
  return walkPipelines(roots, files, parsed, false);
}

/** The files of `cycle` from its `start`th back to it; a long one shortened to its first and last files. */
function cycleFrom(cycle: { file: string }[], start: number): string {
  const at = (i: number) => cycle[(start + i) % cycle.length].file;
  const names =
    cycle.length <= 8
      ? cycle.map((_, i) => at(i))
      : [at(0), at(1), at(2), `… ${cycle.length - 5} more …`, at(cycle.length - 2), at(cycle.length - 1)];
  return [...names, at(0)].join(' → ');
}

/**
 * A depth-first walk: each file is checked once (its violations do not depend on the path that reached
 * it), and the files on the current chain find a cycle back to them; a child reached again later is not
 * walked again, so a graph of files each running the next twice costs its size, not 2^depth.
 */
function walkPipelines(
  roots: string[],
  files: Record<string, string>,
  parsed: ParsedFiles,
  unreadable: boolean,
): PipelineViolation[] {
  const violations: PipelineViolation[] = [];
  const done = new Set<string>();
  // The files being walked, in order, each with the component through which the walk went on from it.
  const chain: { file: string; component: string; parameter: string }[] = [];
  const onChain = new Set<string>();
  // Walked with a stack of its own, not recursion: a chain of thousands of files is no stack overflow.
  const frames: { path: string; components: Iterator<Component>; required: Record<string, string[]> }[] = [];
  /** Starts walking `path`: answers whether it is on the chain now (a file that cannot be read is not). */
  const enter = (path: string): boolean => {
    done.add(path);
    const pipeline = parsedFile(path, files, parsed);
    if (pipeline instanceof PipelineFileError) {
      if (unreadable) {
        violations.push({ file: path, component: pipeline.component, parameter: pipeline.parameter, message: pipeline.message });
      }
      return false;
    }
    onChain.add(path);
    const required = pipeline.kind === 'orchestration' ? REQUIRED_ORCHESTRATION_PARAMETERS : REQUIRED_TRANSFORMATION_PARAMETERS;
    frames.push({ path, components: pipeline.components.values(), required });
    return true;
  };
  for (const root of roots) {
    if (done.has(root) || !enter(root)) continue;
    while (frames.length > 0) {
      const { path, components, required } = frames.at(-1)!;
      const next = components.next();
      if (next.done) {
        frames.pop();
        onChain.delete(path);
        chain.pop();
        continue;
      }
      const component = next.value;
      if (component.skipped) continue;
      for (const parameter of required[component.type] ?? []) {
        if (missing(component.parameters[parameter])) {
          violations.push({ file: path, component: component.name, parameter, message: 'required' });
        }
      }
      if (ATTACHING.has(component.type) && component.iterationTarget === undefined) {
        violations.push({
          file: path,
          component: component.name,
          parameter: 'iterationTarget',
          message: 'required: the component it runs',
        });
      }
      const child = childOf(component, (path) => Object.hasOwn(files, path));
      if (!child) continue;
      const { named, target } = child;
      const step = { file: path, component: component.name, parameter: child.parameter };
      if (target === undefined) {
        violations.push({ ...step, message: `"${named}" is not a pipeline of this version` });
      } else if (!target.endsWith(CHILDREN[component.type].suffix)) {
        // Named with the other kind's suffix: the agent would refuse it at that step, after what ran before it.
        const kind =
          CHILDREN[component.type].suffix === PIPELINE_SUFFIXES.orchestration ? 'an orchestration' : 'a transformation';
        violations.push({
          ...step,
          message: `"${named}" is not ${kind} pipeline of this version (its file is of the other kind)`,
        });
      } else if (onChain.has(target)) {
        // Named on each file of the cycle, starting from it, as a walk from that file would find it.
        const from = target === path ? chain.length : chain.findIndex((link) => link.file === target);
        const cycle = [...chain.slice(from), step];
        cycle.forEach((link, i) =>
          violations.push({ ...link, message: `pipelines run each other in a cycle: ${cycleFrom(cycle, i)}` }),
        );
      } else if (!done.has(target)) {
        chain.push(step);
        if (!enter(target)) chain.pop();
      }
    }
  }
  // A violation found on more than one walk (a cycle seen again): each once.
  const seen = new Set<string>();
  return violations.filter((v) => !seen.has(describeViolation(v)) && seen.add(describeViolation(v)));
}
