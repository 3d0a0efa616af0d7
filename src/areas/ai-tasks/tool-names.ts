/** The agent's tools, by name; what each does is in tools.ts. Kept apart so that schemas need not load the tools. */
export const TOOL_NAMES = [
  'list_files',
  'read_file',
  'write_files',
  'list_pipelines',
  'list_variables',
  'list_environments',
  'run_pipeline',
  'get_pipeline_execution',
] as const;
export type ToolName = (typeof TOOL_NAMES)[number];
