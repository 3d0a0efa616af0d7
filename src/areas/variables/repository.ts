/**
 * The variables' SQL: rows of `projectVariables`, their counter `projectVariableCounts` and their overrides
 * `variableOverrides`, and nothing else. The rules (values fitting types, unique names, 404s, how a variable
 * is shown) are the service's (service.ts).
 */
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { preparedQuery } from '../../core/db/prepared.ts';
import type { ProjectListQueries } from '../projects/index.ts';
import type { ProjectVariableTable, VariableOverrideTable } from './tables.ts';

export type VariableRow = Selectable<ProjectVariableTable>;

/** The columns an answer shows: a page reads only these. */
export const SHOWN = ['id', 'name', 'type', 'behaviour', 'description', 'value', 'supportsDoubleResolution'] as const;
export type ShownVariableRow = Pick<VariableRow, (typeof SHOWN)[number]>;

/** What an update may change. */
export type VariableChanges = Partial<
  Pick<VariableRow, 'type' | 'behaviour' | 'description' | 'value' | 'supportsDoubleResolution'>
>;

/** Moves the counter behind a page's total by `delta`; in the transaction of the insert or delete it counts. */
export const countVariables = preparedQuery((db, { projectId, delta }: { projectId: string; delta: 1 | -1 }) =>
  db
    .insertInto('projectVariableCounts')
    .values({ projectId, total: delta })
    .onConflict((oc) => oc.column('projectId').doUpdateSet((eb) => ({ total: eb('projectVariableCounts.total', '+', delta) }))),
);

/** Inserts a variable. A name taken in the project is a unique violation. */
export const insertVariable = preparedQuery((db, row: VariableRow) =>
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

/** The queries of a paged list of the project's variables in name order; the total is the counter. */
export const variableListQueries: ProjectListQueries<ShownVariableRow> = {
  total: (eb, projectId) => eb.selectFrom('projectVariableCounts').select('total').where('projectId', '=', projectId).$asScalar(),
  page: (db, { projectId, limit, offset }, descending) =>
    db
      .selectFrom('projectVariables')
      .select(SHOWN)
      .where('projectId', '=', projectId)
      .orderBy('name', descending ? 'desc' : 'asc')
      .limit(limit)
      .offset(offset),
};

/** Variable `name` of the project, if there is one. */
export function findVariable(db: Executor, projectId: string, name: string): Promise<VariableRow | undefined> {
  return db
    .selectFrom('projectVariables')
    .selectAll()
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
}

/** Writes an update's changes to variable `id`. */
export async function updateVariableRow(db: Executor, id: string, changes: VariableChanges): Promise<void> {
  await db.updateTable('projectVariables').set(changes).where('id', '=', id).execute();
}

/** Deletes variable `name` of the project (its overrides cascade); whether there was one. */
export async function deleteVariableRow(db: Executor, projectId: string, name: string): Promise<boolean> {
  const result = await db
    .deleteFrom('projectVariables')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}

/** The variable's overrides: environment ids and values as stored (JSON text). */
export function overrideRows(db: Executor, variableId: string) {
  return db.selectFrom('variableOverrides').select(['environmentId', 'value']).where('variableId', '=', variableId).execute();
}

/** Writes each override, replacing the value of one the variable already has in that environment. */
export async function upsertOverrides(db: Executor, rows: VariableOverrideTable[]): Promise<void> {
  await db
    .insertInto('variableOverrides')
    .values(rows)
    .onConflict((oc) => oc.columns(['variableId', 'environmentId']).doUpdateSet((eb) => ({ value: eb.ref('excluded.value') })))
    .execute();
}

/** Deletes the variable's override in environment `environmentId`; whether there was one. */
export async function deleteOverrideRow(db: Executor, variableId: string, environmentId: string): Promise<boolean> {
  const result = await db
    .deleteFrom('variableOverrides')
    .where('variableId', '=', variableId)
    .where('environmentId', '=', environmentId)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
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
