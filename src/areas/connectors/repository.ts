/** The connector profiles' SQL: rows of `customConnectors` and nothing else. The rules are the service's (service.ts). */
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

/** Writes changes to the account's profile `id` unless it is deleted; whether one was changed. */
export async function updateLiveCustomConnector(
  db: Executor,
  accountId: string,
  id: string,
  changes: Partial<Pick<CustomConnectorTable, 'name' | 'document' | 'deleted' | 'deletedTime' | 'lastModified'>>,
): Promise<boolean> {
  const result = await db
    .updateTable('customConnectors')
    .set(changes)
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .where('deleted', '=', 0)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}
