/**
 * The pipeline file model, shared by the server (which checks a file before a run starts) and the agents
 * (which run it): the real service's YAML, `type: "orchestration"` with `pipeline.components` keyed by
 * name, each with `type`, `parameters` and `transitions`, and `pipeline.variables` with their metadata.
 * Pure: no I/O, no server or agent code.
 */
import { parseBoundedYaml, PIPELINE_YAML_BOUNDS } from './bounded-yaml.ts';

/** Pipeline file suffixes: the one place that names them. */
export const PIPELINE_SUFFIXES = {
  orchestration: '.orch.yaml',
  transformation: '.tran.yaml',
  /** A test pipeline is an orchestration pipeline whose name ends so. */
  test: '.test.orch.yaml',
} as const;

export type VariableValue = string | number;

export interface Component {
  name: string;
  type: string;
  skipped: boolean;
  parameters: Record<string, unknown>;
  transitions: { success: string[]; failure: string[]; unconditional: string[] };
}

export interface Pipeline {
  components: Map<string, Component>;
  /** Variables the file declares, with their default values. */
  variables: Record<string, { type: string; defaultValue?: unknown }>;
}

/** A pipeline file that cannot be run as it is. */
export class PipelineFileError extends Error {}

function names(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) return [String(value)];
  return value.map(String);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Reads an orchestration pipeline file into its graph, or PipelineFileError saying what is wrong. */
export function parsePipeline(text: string): Pipeline {
  const parsed = parseBoundedYaml(text, PIPELINE_YAML_BOUNDS);
  if ('refused' in parsed) throw new PipelineFileError(`The pipeline file is ${parsed.refused}.`);
  const document = parsed.value;
  if (!isRecord(document) || !isRecord(document.pipeline) || !isRecord(document.pipeline.components)) {
    throw new PipelineFileError('The pipeline file has no pipeline.components mapping.');
  }
  if (document.type !== undefined && document.type !== 'orchestration') {
    throw new PipelineFileError(`Only orchestration pipelines run; this file is of type "${String(document.type)}".`);
  }
  const components = new Map<string, Component>();
  for (const [name, raw] of Object.entries(document.pipeline.components)) {
    if (!isRecord(raw) || typeof raw.type !== 'string') throw new PipelineFileError(`Component "${name}" has no type.`);
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
      },
    });
  }
  for (const component of components.values()) {
    const { success, failure, unconditional } = component.transitions;
    for (const target of [...success, ...failure, ...unconditional]) {
      if (!components.has(target)) {
        throw new PipelineFileError(`Component "${component.name}" has a transition to "${target}", which does not exist.`);
      }
    }
  }
  const starts = [...components.values()].filter((component) => component.type === 'start');
  if (starts.length !== 1) throw new PipelineFileError(`The pipeline needs one start component; it has ${starts.length}.`);
  // Keyed by names the file chooses (`__proto__` among them): an object without a prototype.
  const variables = Object.create(null) as Pipeline['variables'];
  if (isRecord(document.pipeline.variables)) {
    for (const [name, raw] of Object.entries(document.pipeline.variables)) {
      const metadata = isRecord(raw) && isRecord(raw.metadata) ? raw.metadata : {};
      variables[name] = {
        type: typeof metadata.type === 'string' ? metadata.type : 'TEXT',
        ...(isRecord(raw) && raw.defaultValue !== undefined && { defaultValue: raw.defaultValue }),
      };
    }
  }
  return { components, variables };
}
