import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound, unprocessable } from '../../core/problems.ts';
import { projectList } from '../projects/index.ts';
import { preparedQuery } from '../../core/db/prepared.ts';
import { environmentIdsByName, environmentNamesById, requireEnvironmentId } from '../environments/index.ts';
import type { ProjectVariableTable } from './tables.ts';
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

type VariableRow = Selectable<ProjectVariableTable>;

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

/** The columns an answer shows: a page reads only these. */
const SHOWN = ['id', 'name', 'type', 'behaviour', 'description', 'value', 'supportsDoubleResolution'] as const;

function toVariable(row: Pick<VariableRow, (typeof SHOWN)[number]>): Variable {
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

/** The counter behind a page's total; moved in the transaction of the insert or delete it counts. */
const countVariables = preparedQuery((db, { projectId, delta }: { projectId: string; delta: 1 | -1 }) =>
  db
    .insertInto('projectVariableCounts')
    .values({ projectId, total: delta })
    .onConflict((oc) => oc.column('projectId').doUpdateSet((eb) => ({ total: eb('projectVariableCounts.total', '+', delta) }))),
);

const insertVariable = preparedQuery((db, row: VariableRow) =>
  db.insertInto('projectVariables').values({
    id: row.id,
    projectId: row.projectId,
    name: row.name,
    type: row.type,
    behaviour: row.behaviour,
    description: row.description,
    value: row.value,
    supportsDoubleResolution: row.supportsDoubleResolution,
    createdAt: row.createdAt,
  }),
);

/** A page of the project's variables in name order, if the project is the caller's; the total is the counter. */
export const listVariables = projectList({
  total: (eb, projectId) => eb.selectFrom('projectVariableCounts').select('total').where('projectId', '=', projectId).$asScalar(),
  page: (db, { projectId, limit, offset }, descending) =>
    db
      .selectFrom('projectVariables')
      .select(SHOWN)
      .where('projectId', '=', projectId)
      .orderBy('name', descending ? 'desc' : 'asc')
      .limit(limit)
      .offset(offset),
  toItem: toVariable,
});

export async function requireVariable(db: Executor, projectId: string, name: string): Promise<VariableRow> {
  const row = await db
    .selectFrom('projectVariables')
    .selectAll()
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (!row) throw notFound(`Variable "${name}" does not exist in this project.`);
  return row;
}

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
  await db.updateTable('projectVariables').set(changes).where('id', '=', row.id).execute();
  return toVariable({ ...row, ...changes });
}

/** Removes the variable; its overrides go with it (foreign keys cascade). */
export async function deleteVariable(db: Executor, projectId: string, name: string): Promise<void> {
  const result = await db
    .deleteFrom('projectVariables')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (result.numDeletedRows === 0n) throw notFound(`Variable "${name}" does not exist in this project.`);
  await countVariables(db, { projectId, delta: -1 });
}

export async function overridesOf(db: Executor, variableId: string, environmentName?: string): Promise<Override[]> {
  const rows = await db
    .selectFrom('variableOverrides')
    .select(['environmentId', 'value'])
    .where('variableId', '=', variableId)
    .execute();
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

export function variableWithOverrides(row: VariableRow, overrides: Override[]) {
  return { ...toVariable(row), overrides };
}

/**
 * Creates or updates the override of each listed environment. One that cannot be written (no such
 * environment, a value that does not fit the variable) is answered in failedOverride; the rest are written.
 */
export async function writeOverrides(
  db: Executor,
  projectId: string,
  variable: VariableRow,
  items: WriteOverridesRequest,
): Promise<WriteOverridesResponse> {
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
  if (rows.length > 0) {
    await db
      .insertInto('variableOverrides')
      .values(rows)
      .onConflict((oc) => oc.columns(['variableId', 'environmentId']).doUpdateSet((eb) => ({ value: eb.ref('excluded.value') })))
      .execute();
  }
  return answer;
}

export async function deleteOverride(
  db: Executor,
  projectId: string,
  variableId: string,
  environmentName: string,
): Promise<void> {
  const environmentId = await requireEnvironmentId(db, projectId, environmentName);
  const result = await db
    .deleteFrom('variableOverrides')
    .where('variableId', '=', variableId)
    .where('environmentId', '=', environmentId)
    .executeTakeFirst();
  if (result.numDeletedRows === 0n) throw notFound(`The variable has no override in environment "${environmentName}".`);
}

/**
 * The project's variables as a run in `environmentId` sees them: each with its type and its value as stored
 * (JSON text), the environment's override in place of the project default; null when neither is set.
 */
export async function variableValuesIn(db: Executor, projectId: string, environmentId: string) {
  const rows = await db
    .selectFrom('projectVariables')
    .leftJoin('variableOverrides', (join) =>
      join
        .onRef('variableOverrides.variableId', '=', 'projectVariables.id')
        .on('variableOverrides.environmentId', '=', environmentId),
    )
    .select(['projectVariables.name', 'projectVariables.type', 'projectVariables.value', 'variableOverrides.value as override'])
    .where('projectVariables.projectId', '=', projectId)
    .execute();
  return rows.map((row) => ({ name: row.name, type: row.type, value: row.override ?? row.value }));
}
