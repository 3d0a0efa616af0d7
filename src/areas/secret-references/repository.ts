/** The secret references' SQL: rows of `secretReferences` and nothing else. The rules are the service's (service.ts). */
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';
import type { SecretReferenceTable } from './tables.ts';

export type SecretReferenceRow = Selectable<SecretReferenceTable>;

/** Inserts a reference. A name taken in the project is a unique violation. */
export async function insertSecretReference(db: Executor, row: SecretReferenceRow): Promise<void> {
  await db.insertInto('secretReferences').values(row).execute();
}

/** A page of the project's references of one type (and one provider when given), by name, and how many match. */
export async function listSecretReferenceRows(
  db: Executor,
  projectId: string,
  filter: { type: string; provider?: string },
  query: PageQuery,
): Promise<{ rows: SecretReferenceRow[]; total: number }> {
  let filtered = db.selectFrom('secretReferences').where('projectId', '=', projectId).where('type', '=', filter.type);
  if (filter.provider !== undefined) filtered = filtered.where('provider', '=', filter.provider);
  const [rows, total] = await Promise.all([
    filtered.selectAll().orderBy('name').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(filtered),
  ]);
  return { rows, total };
}

/** Deletes the project's reference of that name; whether there was one. */
export async function deleteSecretReferenceRow(db: Executor, projectId: string, name: string): Promise<boolean> {
  const result = await db
    .deleteFrom('secretReferences')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}
