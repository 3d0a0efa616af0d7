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

/** Where a page ended: the sort key of its last item (one value, or several for a tie-broken order). */
export type PageKey = readonly (string | number)[];

/** The token that continues a list after the item whose sort key is `key`. */
export function tokenAfter(key: PageKey): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

/**
 * The sort key a paginationToken continues after, checked against the shape the list uses (`kinds`: the
 * type of each part), or a 400 naming the parameter; undefined without a token (the first page).
 */
export function keyOf<K extends PageKey>(
  token: string | undefined,
  kinds: { [I in keyof K]: K[I] extends number ? 'number' : 'string' },
): K | undefined {
  if (token === undefined) return undefined;
  let key: unknown;
  try {
    key = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    key = undefined;
  }
  const fits =
    Array.isArray(key) &&
    key.length === kinds.length &&
    key.every((part, index) => typeof part === kinds[index] && (typeof part !== 'number' || Number.isSafeInteger(part))) &&
    tokenAfter(key) === token;
  if (!fits)
    throw badRequest('The paginationToken is not one this list gave out.', ['paginationToken: not a token of this list']);
  return key as K;
}

/** A page from `rows` fetched with one row more than `limit`: that extra row says whether a next page exists. */
export function tokenPageOf<R, T>(rows: R[], limit: number, keyOfRow: (row: R) => PageKey, toItem: (row: R) => T) {
  const page = rows.slice(0, limit);
  const more = rows.length > limit ? tokenAfter(keyOfRow(page[page.length - 1])) : null;
  return { more, results: page.map(toItem) };
}
