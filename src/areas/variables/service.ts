/**
 * The variables' rules: a value fits its variable's type (a change of type leaves every value fitting),
 * names unique in the project, overrides only of the project's environments, 404s, and how a variable is
 * shown. The SQL is the repository's (repository.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Db, Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound, unprocessable } from '../../core/problems.ts';
import { projectList, requireProject } from '../projects/index.ts';
import { environmentIdsByName, environmentNamesById, requireEnvironmentId } from '../environments/index.ts';
import {
  countVariables,
  deleteOverrideRow,
  deleteVariableRow,
  findVariable,
  insertVariable,
  overrideRows,
  updateVariableRow,
  upsertOverrides,
  variableListQueries,
  type ShownVariableRow,
  type VariableRow,
} from './repository.ts';
import type {
  CreateVariableRequest,
  Override,
  UpdateVariableRequest,
  Variable,
  VariableType,
  VariableValue,
  WriteOverridesRequest,
  WriteOverridesResponse,
} from './schemas.ts';

/** A JSON number written as a string: what scripts send for a NUMBER value ("1", "-2.5", "1e3"). */
const NUMERIC = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;

/**
 * `value` as a variable of `type` keeps it, or undefined when it does not fit: TEXT takes strings; NUMBER
 * takes JSON numbers and numeric strings (scripts send every value as a string), kept as the number.
 */
export function valueOfType(type: string, value: unknown): VariableValue | undefined {
  if (type === 'TEXT') return typeof value === 'string' ? value : undefined;
  if (type !== 'NUMBER') return undefined;
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && NUMERIC.test(value) && Number.isFinite(Number(value))) return Number(value);
  return undefined;
}

/** Whether `value` fits a variable of `type` (see valueOfType). */
function fits(type: VariableType, value: VariableValue): boolean {
  return valueOfType(type, value) !== undefined;
}

function expected(type: VariableType): string {
  return `must be a ${type === 'NUMBER' ? 'number' : 'string'} for a ${type} variable`;
}

function parseValue(text: string | null): VariableValue | undefined {
  return text === null ? undefined : (JSON.parse(text) as VariableValue);
}

function toVariable(row: ShownVariableRow): Variable {
  const value = parseValue(row.value);
  return {
    id: row.id,
    name: row.name,
    type: row.type as VariableType,
    behaviour: row.behaviour as Variable['behaviour'],
    ...(row.description !== null && { description: row.description }),
    ...(value !== undefined && { value }),
    supportsDoubleResolution: row.supportsDoubleResolution === 1,
  };
}

/** A page of the project's variables in name order, if the project is the caller's; the total is the counter. */
export const listVariables = projectList({ ...variableListQueries, toItem: toVariable });

/** Variable `name` of the project, or a 404. */
export async function requireVariable(db: Executor, projectId: string, name: string): Promise<VariableRow> {
  const row = await findVariable(db, projectId, name);
  if (!row) throw notFound(`Variable "${name}" does not exist in this project.`);
  return row;
}

/** Creates a variable of the project: a value must fit its type (422), a name taken is a 409. */
export async function createVariable(db: Executor, projectId: string, request: CreateVariableRequest): Promise<Variable> {
  if (request.value !== undefined && !fits(request.type, request.value)) {
    throw unprocessable('The value does not fit the type of the variable.', [`body.value: ${expected(request.type)}`]);
  }
  const row: VariableRow = {
    id: randomUUID(),
    projectId,
    name: request.name,
    type: request.type,
    behaviour: request.behaviour,
    description: request.description ?? null,
    value: request.value === undefined ? null : JSON.stringify(valueOfType(request.type, request.value)),
    supportsDoubleResolution: request.supportsDoubleResolution ? 1 : 0,
    createdAt: now(),
  };
  try {
    await insertVariable(db, row);
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`A variable named "${request.name}" already exists in this project.`);
    throw error;
  }
  await countVariables(db, { projectId, delta: 1 });
  return toVariable(row);
}

/**
 * Partial update. A change of type must leave the value and every override fitting the new type;
 * otherwise nothing changes and each misfit is named.
 */
export async function updateVariable(
  db: Executor,
  projectId: string,
  name: string,
  request: UpdateVariableRequest,
): Promise<Variable> {
  const row = await requireVariable(db, projectId, name);
  const violations: string[] = [];
  if (request.value !== undefined) {
    if (!fits(request.type, request.value)) violations.push(`body.value: ${expected(request.type)}`);
  } else {
    const current = parseValue(row.value);
    if (current !== undefined && !fits(request.type, current)) {
      violations.push(`body.value: the current value ${expected(request.type)}; send a new value with the type`);
    }
  }
  if (request.type !== row.type) {
    const misfits = (await overridesOf(db, row.id)).filter((override) => !fits(request.type, override.value));
    for (const override of misfits) {
      violations.push(`environmentName: the override of "${override.environmentName}" ${expected(request.type)}`);
    }
  }
  if (violations.length > 0)
    throw unprocessable('The change would leave values that do not fit the type of the variable.', violations);
  const changes = {
    type: request.type,
    behaviour: request.behaviour,
    ...(request.description !== undefined && { description: request.description }),
    ...(request.value !== undefined && { value: JSON.stringify(valueOfType(request.type, request.value)) }),
    ...(request.supportsDoubleResolution !== undefined && { supportsDoubleResolution: request.supportsDoubleResolution ? 1 : 0 }),
  };
  await updateVariableRow(db, row.id, changes);
  return toVariable({ ...row, ...changes });
}

/** Removes the variable; its overrides go with it (foreign keys cascade). A 404 when there is none. */
export async function deleteVariable(db: Executor, projectId: string, name: string): Promise<void> {
  if (!(await deleteVariableRow(db, projectId, name))) throw notFound(`Variable "${name}" does not exist in this project.`);
  await countVariables(db, { projectId, delta: -1 });
}

/** The variable's overrides by environment name (of environment `environmentName` alone when given). */
async function overridesOf(db: Executor, variableId: string, environmentName?: string): Promise<Override[]> {
  const rows = await overrideRows(db, variableId);
  const names = await environmentNamesById(
    db,
    rows.map((row) => row.environmentId),
  );
  return rows
    .flatMap((row) => {
      const name = names.get(row.environmentId);
      return name === undefined || (environmentName !== undefined && name !== environmentName)
        ? []
        : [{ environmentName: name, value: JSON.parse(row.value) as VariableValue }];
    })
    .sort((a, b) => (a.environmentName < b.environmentName ? -1 : a.environmentName > b.environmentName ? 1 : 0));
}

/**
 * Variable `variableName` of the caller's project with all its overrides, or, with `environmentName`, the
 * override of that environment alone (a 404 when it has none).
 */
export async function readOverrides(
  db: Db,
  accountId: string,
  projectId: string,
  variableName: string,
  environmentName: string | undefined,
): Promise<(Variable & { overrides: Override[] }) | Override> {
  await requireProject(db, accountId, projectId);
  const variable = await requireVariable(db, projectId, variableName);
  const overrides = await overridesOf(db, variable.id, environmentName);
  if (environmentName === undefined) return { ...toVariable(variable), overrides };
  if (overrides.length === 0) throw notFound(`The variable has no override in environment "${environmentName}".`);
  return overrides[0];
}

/**
 * Creates or updates the override of each listed environment of variable `variableName` (a 404 when the
 * project has none). One that cannot be written (no such environment, a value that does not fit the
 * variable) is answered in failedOverride; the rest are written. An environment listed twice is a 400.
 */
export async function writeOverrides(
  db: Executor,
  projectId: string,
  variableName: string,
  items: WriteOverridesRequest,
): Promise<WriteOverridesResponse> {
  const variable = await requireVariable(db, projectId, variableName);
  const seen = new Set<string>();
  const repeated = items.flatMap((item, index) => {
    if (seen.has(item.environmentName))
      return [`body.${index}.environmentName: "${item.environmentName}" is listed more than once`];
    seen.add(item.environmentName);
    return [];
  });
  if (repeated.length > 0) throw badRequest('Each environment may be listed once.', repeated);

  const environmentIds = await environmentIdsByName(db, projectId, [...seen]);
  const type = variable.type as VariableType;
  const answer: WriteOverridesResponse = { overrides: [], failedOverride: [] };
  const rows = [];
  for (const { environmentName, value } of items) {
    const environmentId = environmentIds.get(environmentName);
    if (environmentId === undefined) {
      answer.failedOverride.push({ environmentName, reason: 'The environment does not exist in this project.' });
    } else if (!fits(type, value)) {
      answer.failedOverride.push({ environmentName, reason: `The value ${expected(type)}.` });
    } else {
      const kept = valueOfType(type, value)!;
      answer.overrides.push({ environmentName, value: kept });
      rows.push({ variableId: variable.id, environmentId, value: JSON.stringify(kept) });
    }
  }
  if (rows.length > 0) await upsertOverrides(db, rows);
  return answer;
}

/** Removes the override of variable `variableName` in environment `environmentName`: a 404 when any of them is missing. */
export async function deleteOverride(
  db: Executor,
  projectId: string,
  variableName: string,
  environmentName: string,
): Promise<void> {
  const variable = await requireVariable(db, projectId, variableName);
  const environmentId = await requireEnvironmentId(db, projectId, environmentName);
  if (!(await deleteOverrideRow(db, variable.id, environmentId))) {
    throw notFound(`The variable has no override in environment "${environmentName}".`);
  }
}
