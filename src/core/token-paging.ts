import { Type, type Static, type TSchema } from 'typebox';
import { badRequest } from './problems.ts';

/**
 * Token-paged lists (`limit`, `paginationToken`): `more` is the opaque token of the next page, sent back
 * as `paginationToken`, and null on the last page. The token carries the position after the page's
 * last item, so a page stays exact while items are added behind it.
 */
export const TokenPageQuery = Type.Object({
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 25, description: 'items per page' }),
  paginationToken: Type.Optional(
    Type.String({ minLength: 1, maxLength: 200, description: 'the `more` of the previous page; omit for the first page' }),
  ),
});
export type TokenPageQuery = Static<typeof TokenPageQuery>;

export function TokenPage<T extends TSchema>(item: T) {
  return Type.Object({
    more: Type.Union([Type.String(), Type.Null()], {
      description: 'token of the next page (send it as paginationToken); null on the last page',
    }),
    results: Type.Array(item),
  });
}

const PREFIX = 'after:';

/** The token that continues a list after the item at `position`. */
export function tokenAfter(position: number): string {
  return Buffer.from(`${PREFIX}${position}`).toString('base64url');
}

/** The position a paginationToken continues after (0 without one), or a 400 naming the parameter. */
export function positionOf(token: string | undefined): number {
  if (token === undefined) return 0;
  const text = Buffer.from(token, 'base64url').toString('utf8');
  const position = text.startsWith(PREFIX) ? Number(text.slice(PREFIX.length)) : NaN;
  if (!Number.isSafeInteger(position) || position < 0 || tokenAfter(position) !== token) {
    throw badRequest('The paginationToken is not one this list gave out.', ['paginationToken: not a token of this list']);
  }
  return position;
}

/** A page from `rows` fetched with one row more than `limit`: that extra row says whether a next page exists. */
export function tokenPageOf<R, T>(rows: R[], limit: number, positionOfRow: (row: R) => number, toItem: (row: R) => T) {
  const page = rows.slice(0, limit);
  const more = rows.length > limit ? tokenAfter(positionOfRow(page[page.length - 1])) : null;
  return { more, results: page.map(toItem) };
}
