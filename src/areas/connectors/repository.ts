/** The connector profiles' SQL: rows of `customConnectors` and nothing else. The rules are the service's (service.ts). */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import type { CustomConnectorTable } from './tables.ts';

export type CustomConnectorRow = Selectable<CustomConnectorTable>;

/** Inserts a profile. */
export async function insertCustomConnector(db: Executor, row: CustomConnectorRow): Promise<void> {
  await db.insertInto('customConnectors').values(row).execute();
}

/** The account's profiles by name (then id); deleted ones only when asked for. */
export function customConnectorRows(db: Executor, accountId: string, includeDeleted: boolean): Promise<CustomConnectorRow[]> {
  let query = db.selectFrom('customConnectors').selectAll().where('accountId', '=', accountId);
  if (!includeDeleted) query = query.where('deleted', '=', 0);
  return query.orderBy('name').orderBy('id').execute();
}

/** Profile `id` of the account, deleted or not. */
export function findCustomConnector(db: Executor, accountId: string, id: string): Promise<CustomConnectorRow | undefined> {
  return db.selectFrom('customConnectors').selectAll().where('id', '=', id).where('accountId', '=', accountId).executeTakeFirst();
}

/**
 * Writes changes to the account's profile `id` unless it is deleted, one version on; whether one was changed.
 * Where the request's If-Match check saw a version of this row, only that version is changed: a 412 when
 * another write came between (core/conditional.ts); a profile still at that version but deleted is no change.
 */
export async function updateLiveCustomConnector(
  db: Executor,
  accountId: string,
  id: string,
  changes: Partial<Pick<CustomConnectorTable, 'name' | 'document' | 'deleted' | 'deletedTime' | 'lastModified'>>,
): Promise<boolean> {
  const expected = expectedRowVersion('customConnectors', id);
  let update = db
    .updateTable('customConnectors')
    .set({ ...changes, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .where('deleted', '=', 0);
  if (expected !== undefined) update = update.where('rowVersion', '=', expected);
  const changed = (await update.executeTakeFirst()).numUpdatedRows > 0n;
  if (expected !== undefined) {
    const unchanged = !changed && (await findCustomConnector(db, accountId, id))?.rowVersion === expected;
    heldExpectedVersion('customConnectors', id, changed || unchanged);
  }
  return changed;
}
