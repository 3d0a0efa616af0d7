/** The OAuth connections' SQL: rows of `oauthConnections` and nothing else. The rules are the service's (service.ts). */
import { expectedRowVersion, heldExpectedVersion } from '../../core/conditional.ts';
import type { Insertable, Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import type { OAuthConnectionTable } from './tables.ts';

export type OAuthConnectionRow = Selectable<OAuthConnectionTable>;

/** Inserts an OAuth connection. A name taken in the account is a unique violation. */
export async function insertOAuthConnection(db: Executor, row: Insertable<OAuthConnectionTable>): Promise<void> {
  await db.insertInto('oauthConnections').values(row).execute();
}

/** The account's OAuth connections, oldest first. */
export function oauthConnectionRows(db: Executor, accountId: string): Promise<OAuthConnectionRow[]> {
  return db.selectFrom('oauthConnections').selectAll().where('accountId', '=', accountId).orderBy('seq').execute();
}

/** OAuth connection `id` of the account. */
export function findOAuthConnection(db: Executor, accountId: string, id: string): Promise<OAuthConnectionRow | undefined> {
  return db.selectFrom('oauthConnections').selectAll().where('id', '=', id).where('accountId', '=', accountId).executeTakeFirst();
}

/** Those of `ids` that are OAuth connections of the account. */
export async function existingOAuthConnectionIds(db: Executor, accountId: string, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db
    .selectFrom('oauthConnections')
    .select('id')
    .where('accountId', '=', accountId)
    .where('id', 'in', ids)
    .execute();
  return new Set(rows.map((row) => row.id));
}

/** Writes the tokens' secret reference (JSON text) of the account's connection `id`; whether there was one. */
export async function updateTokens(db: Executor, accountId: string, id: string, tokens: string): Promise<boolean> {
  const result = await db
    .updateTable('oauthConnections')
    .set({ tokens, rowVersion: (eb) => eb('rowVersion', '+', 1) })
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  return result.numUpdatedRows > 0n;
}

/**
 * Deletes the account's OAuth connection `id`; whether there was one. Where the request's If-Match check saw a
 * version of the row, only that version is deleted (a 412 otherwise: core/conditional.ts).
 */
export async function deleteOAuthConnectionRow(db: Executor, accountId: string, id: string): Promise<boolean> {
  const expected = expectedRowVersion('oauthConnections', id);
  let deletion = db.deleteFrom('oauthConnections').where('id', '=', id).where('accountId', '=', accountId);
  if (expected !== undefined) deletion = deletion.where('rowVersion', '=', expected);
  const result = await deletion.executeTakeFirst();
  if (expected !== undefined) heldExpectedVersion('oauthConnections', id, result.numDeletedRows > 0n);
  return result.numDeletedRows > 0n;
}
