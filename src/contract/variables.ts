/** `${name}` references in pipeline parameters, shared by the agent's runner and the transformation compiler. Pure. */
import type { VariableValues } from './pipeline-file.ts';

/** `${name}` references replaced by the variables' values; an unknown one, or a grid, is an error. */
export function substitute(value: unknown, variables: VariableValues): string {
  return String(value ?? '').replace(/\$\{([A-Za-z_$][A-Za-z0-9_$]*)\}/g, (_, name: string) => {
    if (!Object.hasOwn(variables, name)) throw new Error(`Variable "${name}" is not defined.`);
    const value = variables[name];
    if (Array.isArray(value)) throw new Error(`Variable "${name}" is a grid; a parameter can only take a scalar.`);
    return String(value);
  });
}

/** The rows of a grid parameter: `[[a, b], [c, d]]`, or a list of single values. */
export function rowsOf(value: unknown): unknown[][] {
  if (!Array.isArray(value)) return [];
  return value.map((row) => (Array.isArray(row) ? row : [row]));
}

/** A list parameter: `[a, b]`, or one value; rows keep their first cell. */
export function listOf(value: unknown): string[] {
  if (value === undefined || value === null || value === '') return [];
  if (!Array.isArray(value)) return [String(value)];
  return value.map((item) => String(Array.isArray(item) ? item[0] : item));
}

/** "Yes"/"No" (or a boolean) parameters. */
export function yes(value: unknown, otherwise = false): boolean {
  if (value === undefined || value === null || value === '') return otherwise;
  return value === true || String(value).toLowerCase() === 'yes' || String(value).toLowerCase() === 'true';
}
