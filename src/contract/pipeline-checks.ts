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

function findFile(files: Record<string, string>, name: string, suffix: string): string | undefined {
  const stripped = name.replace(/^\/+/, '');
  return [stripped, `${stripped}${suffix}`].find((candidate) => Object.hasOwn(files, candidate));
}

/** The child pipeline a component runs: the parameter naming it, the name, and its file when the version has it. */
function childOf(component: Component, files: Record<string, string>) {
  const child =
    component.type === 'run-orchestration'
      ? { parameter: 'orchestrationJob', suffix: PIPELINE_SUFFIXES.orchestration }
      : component.type === 'run-transformation'
        ? { parameter: 'transformationJob', suffix: PIPELINE_SUFFIXES.transformation }
        : undefined;
  const named = child && component.parameters[child.parameter];
  // A name made of variables is resolved when the run gets there.
  if (!child || typeof named !== 'string' || named === '' || named.includes('${')) return undefined;
  return { parameter: child.parameter, named, target: findFile(files, named, child.suffix) };
}

/**
 * `file` and every pipeline it runs, theirs, and so on (children named through variables are known only
 * when the run gets there); files that cannot be read are listed and not followed.
 */
export function pipelinesRunBy(file: string, files: Record<string, string>): string[] {
  const seen: string[] = [];
  const visit = (path: string) => {
    if (seen.includes(path) || !Object.hasOwn(files, path)) return;
    seen.push(path);
    let pipeline: Pipeline;
    try {
      pipeline = parsePipelineFile(files[path]);
    } catch {
      return;
    }
    for (const component of pipeline.components.values()) {
      const child = component.skipped ? undefined : childOf(component, files);
      if (child?.target !== undefined) visit(child.target);
    }
  };
  visit(file);
  return seen;
}

/**
 * Every violation of `file` and the pipelines it runs. `files` are the artifact's pipeline files by path.
 * A file that cannot be parsed at all throws PipelineFileError (the caller's 422); everything else is
 * answered as violations (the caller's 400).
 */
export function checkPipeline(file: string, files: Record<string, string>): PipelineViolation[] {
  const violations: PipelineViolation[] = [];
  const visit = (path: string, chain: string[], top: boolean) => {
    let pipeline: Pipeline;
    try {
      pipeline = parsePipelineFile(files[path]);
    } catch (error) {
      if (top && (!(error instanceof PipelineFileError) || error.component === undefined)) throw error;
      const e = error as PipelineFileError;
      violations.push({ file: path, component: e.component, parameter: e.parameter, message: e.message });
      return;
    }
    const required = pipeline.kind === 'orchestration' ? REQUIRED_ORCHESTRATION_PARAMETERS : REQUIRED_TRANSFORMATION_PARAMETERS;
    for (const component of pipeline.components.values()) {
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
      const child = childOf(component, files);
      if (child) {
        const { named, target } = child;
        if (target === undefined) {
          violations.push({
            file: path,
            component: component.name,
            parameter: child.parameter,
            message: `"${named}" is not a pipeline of this version`,
          });
        } else if (chain.includes(target)) {
          violations.push({
            file: path,
            component: component.name,
            parameter: child.parameter,
            message: `pipelines run each other in a cycle: ${[...chain, target].join(' → ')}`,
          });
        } else visit(target, [...chain, target], false);
      }
    }
  };
  visit(file, [file], true);
  // A child run from two places is checked twice: each violation once.
  const seen = new Set<string>();
  return violations.filter((v) => !seen.has(describeViolation(v)) && seen.add(describeViolation(v)));
}
