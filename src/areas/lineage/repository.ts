import type { Executor } from '../../core/db/database.ts';
import { countOf, offsetOf, type PageQuery } from '../../core/paging.ts';

export async function insertLineageEvent(
  db: Executor,
  row: { accountId: string; projectId: string; executionId: string; generatedAt: string; event: string },
): Promise<void> {
  await db.insertInto('lineageEvents').values(row).execute();
}

/** A page of the account's events recorded in [from, before), in the order they were recorded. */
export async function pageLineageEvents(db: Executor, accountId: string, from: string, before: string, page: PageQuery) {
  const matching = db
    .selectFrom('lineageEvents')
    .where('accountId', '=', accountId)
    .where('generatedAt', '>=', from)
    .where('generatedAt', '<', before);
  const [rows, total] = await Promise.all([
    matching.select(['id', 'event']).orderBy('generatedAt').orderBy('id').limit(page.size).offset(offsetOf(page)).execute(),
    countOf(matching),
  ]);
  return { rows, total };
}
