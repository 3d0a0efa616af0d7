import type { SelectQueryBuilder } from 'kysely';
import { Type, type Static, type TSchema } from 'typebox';

/** The highest page number: any page times any size stays an offset both stores take (a 64-bit integer). */
const MAX_PAGE = 2_147_483_647;

/** `page` (from 0) and `size` (1 to 100, default 25), as every paged list takes them. */
export const PageQuery = Type.Object({
  page: Type.Integer({ minimum: 0, maximum: MAX_PAGE, default: 0, description: 'page number, from 0' }),
  size: Type.Integer({ minimum: 1, maximum: 100, default: 25, description: 'items per page' }),
});
export type PageQuery = Static<typeof PageQuery>;

/** The specification's paged list wrapper around items of `item`. */
export function Page<T extends TSchema>(item: T) {
  return Type.Object({
    page: Type.Integer({ description: 'page number of this result' }),
    results: Type.Array(item),
    size: Type.Integer({ description: 'page size' }),
    total: Type.Integer({ description: 'total number of items' }),
  });
}

export function offsetOf(query: PageQuery): number {
  return query.page * query.size;
}

export function pageOf<T>(query: PageQuery, results: T[], total: number) {
  return { page: query.page, results, size: query.size, total };
}

/** Which rows of a list of `total` items make the page, read from whichever end of the list is nearer. */
export interface PageWindow {
  limit: number;
  offset: number;
  /** read in reverse order (then reversed back): the page lies in the second half of the list */
  descending: boolean;
}

/**
 * The page as an OFFSET from the nearer end: an OFFSET walks the index entry by entry, so reading the
 * last page of a million rows forwards would walk the million; backwards it walks one page. Pages in
 * the middle still cost their distance from the nearer end. Undefined when the page lies past the end.
 */
export function pageWindow(query: PageQuery, total: number): PageWindow | undefined {
  const offset = offsetOf(query);
  if (offset >= total) return undefined;
  const limit = Math.min(query.size, total - offset);
  const fromEnd = total - offset - limit;
  return fromEnd < offset ? { limit, offset: fromEnd, descending: true } : { limit, offset, descending: false };
}

/** How many rows a filtered query matches. */
export async function countOf(query: SelectQueryBuilder<any, any, any>): Promise<number> {
  const row = await query.select((eb) => eb.fn.countAll<number>().as('total')).executeTakeFirstOrThrow();
  return Number(row.total);
}
