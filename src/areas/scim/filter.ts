/**
 * SCIM filters (RFC 7644 3.4.2.2) compiled to SQL. scim2-parse-filter parses the text; each comparison
 * becomes the set of ids of the account's resources that meet it, looked up in scim_values (one row per
 * leaf value, compared in lower case unless the attribute is case-exact), in the membership table (members,
 * groups) or in the resource table (meta times); and, or and not become intersect, union and except. The
 * list reads the resources of the resulting set by primary key: it never walks the account's resources.
 */
import { sql, type RawBuilder, type SqlBool } from 'kysely';
import { parse, type Filter } from 'scim2-parse-filter';
import type { Dialect } from '../../core/db/database.ts';
import { definitionAt, pathSegments, type AttributeDefinition, type ResourceKind } from './definitions.ts';
import { comparable, scimError } from './resources.ts';

const invalidFilter = (detail: string) => scimError(400, 'invalidFilter', detail);
const invalidSort = (detail: string) => scimError(400, 'invalidValue', detail);

type Sql = RawBuilder<unknown>;
type Compare = Extract<Filter, { compValue: unknown }>;
type Comparison = Compare | Extract<Filter, { op: 'pr' }>;

/** The end of the string literal that starts at `start` (the index after its closing quote). */
function endOfString(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
  return i + 1;
}

const TRAILING_COMPARISON =
  /^\.([A-Za-z][\w$-]*)\s+(?:(pr)\b|(eq|ne|co|sw|ew|gt|ge|lt|le)\s+("(?:[^"\\]|\\.)*"|true|false|null|-?[\d.]+(?:[eE][-+]?\d+)?))/i;

/**
 * `emails[type eq "work"].value co "x"` is read as `emails[(type eq "work") and value co "x"]`: one email
 * must meet both (the parser alone would let two different emails meet one each).
 */
function correlated(text: string): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    if (text[i] === '"') {
      const end = endOfString(text, i);
      out += text.slice(i, end);
      i = end;
    } else if (text[i] === '[') {
      let close = i + 1;
      while (close < text.length && text[close] !== ']') close = text[close] === '"' ? endOfString(text, close) : close + 1;
      if (close >= text.length) throw invalidFilter('The filter has a "[" without its "]".');
      const inner = correlated(text.slice(i + 1, close));
      const trailing = TRAILING_COMPARISON.exec(text.slice(close + 1));
      if (trailing) {
        const [, sub, pr, op, value] = trailing;
        out += `[(${inner}) and ${sub} ${pr ?? `${op} ${value}`}]`;
        i = close + 1 + trailing[0].length;
      } else {
        out += `[${inner}]`;
        i = close + 1;
      }
    } else {
      out += text[i];
      i += 1;
    }
  }
  return out;
}

export function parseFilter(text: string): Filter {
  if (text.length > 4096) throw invalidFilter('The filter is longer than 4096 characters.');
  let filter: Filter;
  try {
    filter = parse(correlated(text));
  } catch (error) {
    throw invalidFilter(`The filter is not valid: ${error instanceof Error ? error.message : 'unparsable'}.`);
  }
  checkSize(filter);
  return filter;
}

/** Deeper or wider than any filter a provider sends; past these the SQL it compiles to is refused by SQLite. */
const MAX_FILTER_DEPTH = 32;
const MAX_OPERANDS = 200;

function checkSize(node: Filter, depth = 1): void {
  if (depth > MAX_FILTER_DEPTH) throw invalidFilter(`The filter nests more than ${MAX_FILTER_DEPTH} levels deep.`);
  switch (node.op) {
    case 'and':
    case 'or':
      if (node.filters.length > MAX_OPERANDS) throw invalidFilter(`An ${node.op} joins more than ${MAX_OPERANDS} comparisons.`);
      for (const operand of node.filters) checkSize(operand, depth + 1);
      return;
    case 'not':
      return checkSize(node.filter, depth + 1);
    case '[]':
      return checkSize(node.valFilter, depth + 1);
  }
}

export interface FilterScope {
  kind: ResourceKind;
  accountId: string;
  dialect: Dialect;
  /** The resource table (scim_users, scim_groups). */
  table: string;
}

/** Characters as SQL counts them (code points), for substr. */
const lengthOf = (text: string) => [...text].length;

/** `column <op> value` for a text column. */
function compared(scope: FilterScope, column: Sql, op: Compare['op'], value: string): Sql {
  const n = lengthOf(value);
  // Every string contains, starts and ends with "" (SQLite's substr(x, -0) would be all of x, not "").
  if (n === 0 && (op === 'co' || op === 'sw' || op === 'ew')) return sql`1 = 1`;
  switch (op) {
    case 'eq':
    case 'ne':
      return sql`${column} = ${value}`;
    case 'co':
      return scope.dialect === 'postgres' ? sql`strpos(${column}, ${value}) > 0` : sql`instr(${column}, ${value}) > 0`;
    case 'sw':
      return sql`substr(${column}, 1, ${n}) = ${value}`;
    case 'ew':
      return scope.dialect === 'postgres' ? sql`right(${column}, ${n}) = ${value}` : sql`substr(${column}, ${-n}) = ${value}`;
    case 'gt':
      return sql`${column} > ${value}`;
    case 'ge':
      return sql`${column} >= ${value}`;
    case 'lt':
      return sql`${column} < ${value}`;
    case 'le':
      return sql`${column} <= ${value}`;
  }
}

/** The comparison value in stored form, refusing what cannot be compared with the attribute. */
function operand(definition: AttributeDefinition, node: Compare): string {
  const { op, compValue, attrPath } = node;
  if (definition.type === 'boolean') {
    if (typeof compValue !== 'boolean' || (op !== 'eq' && op !== 'ne')) {
      throw invalidFilter(`${attrPath} is a boolean: compare it with eq or ne and true or false.`);
    }
    return String(compValue);
  }
  if (typeof compValue !== 'string') throw invalidFilter(`${attrPath} must be compared with a string.`);
  return comparable(definition, compValue);
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|([+-])(\d{2}):(\d{2}))$/i;

/** An instant to the millisecond at or below the date-time, and whether the date-time is exactly that instant. */
interface Instant {
  ms: number;
  exact: boolean;
}

/**
 * An RFC 3339 date-time (section 5.6: full-date "T" full-time, any offset, fractional seconds optional), as an
 * instant; undefined for anything else (a date alone, another format, a day or time out of range). A leap second
 * (23:59:60 UTC) is the instant just after 23:59:59.999.
 */
function rfc3339Instant(text: string): Instant | undefined {
  const match = RFC3339.exec(text);
  if (!match) return undefined;
  const [, year, month, day, hour, minute, second, fraction = '', zone, sign, offsetHours, offsetMinutes] = match;
  const [y, mo, d, h, mi, s] = [year, month, day, hour, minute, second].map(Number);
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  if (date.getUTCFullYear() !== y || date.getUTCMonth() !== mo - 1 || date.getUTCDate() !== d) return undefined;
  if (h > 23 || mi > 59 || s > 60) return undefined;
  let offset = 0;
  if (zone.toUpperCase() !== 'Z') {
    if (Number(offsetHours) > 23 || Number(offsetMinutes) > 59) return undefined;
    offset = (sign === '-' ? -1 : 1) * (Number(offsetHours) * 60 + Number(offsetMinutes)) * 60_000;
  }
  date.setUTCHours(h, mi, Math.min(s, 59), Number(fraction.slice(0, 3).padEnd(3, '0')));
  let ms = date.getTime() - offset;
  let exact = /^0*$/.test(fraction.slice(3));
  if (s === 60) {
    const utc = new Date(ms);
    if (utc.getUTCHours() !== 23 || utc.getUTCMinutes() !== 59) return undefined;
    ms = ms - utc.getUTCMilliseconds() + 999;
    exact = false;
  }
  return { ms, exact };
}

/** The times ISO text holds in order (toISOString's four-digit years): 0000-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z. */
const EARLIEST = -62_167_219_200_000;
const LATEST = 253_402_300_799_999;

/** As in `compared`, ne is eq here: callers negate it. */
const SQL_OPERATORS: Record<string, string> = { eq: '=', ne: '=', gt: '>', ge: '>=', lt: '<', le: '<=' };

/**
 * `column <op> date-time` for a column of ISO times (toISOString: UTC, milliseconds), compared as instants: a
 * date-time between two milliseconds, or beyond the years the column can hold, is compared as what it is.
 */
function comparedInstant(column: Sql, node: Compare): Sql {
  const { op, compValue, attrPath } = node;
  if (['co', 'sw', 'ew'].includes(op)) throw invalidFilter(`${attrPath} is a date-time: use eq, ne, gt, ge, lt or le.`);
  if (typeof compValue !== 'string') throw invalidFilter(`${attrPath} must be compared with an RFC 3339 date-time string.`);
  const instant = rfc3339Instant(compValue);
  if (!instant) throw invalidFilter(`${compValue} is not an RFC 3339 date-time (such as 2024-05-01T12:00:00Z).`);
  const always = sql`1 = 1`;
  const never = sql`1 = 0`;
  const after = op === 'gt' || op === 'ge';
  const before = op === 'lt' || op === 'le';
  // Below every time held, or above.
  if (instant.ms < EARLIEST) return after ? always : never;
  if (instant.ms > LATEST || (instant.ms === LATEST && !instant.exact)) return before ? always : never;
  const time = new Date(instant.ms).toISOString();
  if (instant.exact) return sql`${column} ${sql.raw(SQL_OPERATORS[op])} ${time}`;
  // Strictly between `time` and the next millisecond: no time held equals it.
  if (after) return sql`${column} > ${time}`;
  if (before) return sql`${column} <= ${time}`;
  return never;
}

/** `column <op> value`, the value checked against the attribute and in stored form. */
function comparedWith(scope: FilterScope, column: Sql, definition: AttributeDefinition, node: Compare): Sql {
  if (definition.type === 'dateTime' && node.compValue !== null) return comparedInstant(column, node);
  return compared(scope, column, node.op, operand(definition, node));
}

/** Columns of the resource table that stand for meta's times. */
const META_COLUMNS: Record<string, string> = { 'meta.created': 'created_at', 'meta.lastmodified': 'last_modified' };

/** What a filter's attribute path refers to. */
interface Target {
  root: AttributeDefinition;
  /** The leaf compared: the root itself, a sub-attribute, or a multi-valued complex attribute's `value`. */
  leaf: AttributeDefinition;
  /** Lower-case path as in scim_values. */
  attribute: string;
}

interface TargetOptions {
  /** The multi-valued attribute of a value filter the path is within (`emails[type eq "work"]`). */
  within?: AttributeDefinition;
  /** Whether the path names the attribute as a whole (pr): `emails pr` is any email, not only one with a value. */
  whole?: boolean;
  /** Whether the path is a sortBy: one that cannot be used is then invalidValue (there is no filter), not invalidFilter. */
  sorting?: boolean;
}

function target(scope: FilterScope, path: string, { within, whole = false, sorting = false }: TargetOptions = {}): Target {
  const fail = sorting ? invalidSort : invalidFilter;
  const segments = within ? [within.name, path] : pathSegments(scope.kind, path);
  const root = definitionAt(scope.kind, segments.slice(0, 1));
  let leaf = definitionAt(scope.kind, segments);
  if (!root || !leaf || segments.length > 2) throw fail(`${path} is not an attribute of a ${scope.kind.type}.`);
  let names = segments.map((s) => s.toLowerCase());
  if (leaf.type === 'complex' && leaf.multiValued && segments.length === 1 && !whole) {
    const value = leaf.subAttributes?.find((s) => s.name === 'value');
    if (value) {
      leaf = value;
      names = [...names, 'value'];
    }
  }
  const storedApart = root.name === 'meta' && !(names.join('.') in META_COLUMNS);
  // Read-only attributes other than these are derived when answered (accountId, accountName, projectName):
  // they are not in the stored document, so not in scim_values either.
  const derived = root.mutability === 'readOnly' && root.name !== 'id' && root.name !== 'meta' && !membership(scope, root);
  if (leaf.returned === 'never' || leaf.type === 'binary' || storedApart || derived)
    throw fail(`${path} cannot be ${sorting ? 'sorted by' : 'filtered on'}.`);
  return { root, leaf, attribute: names.join('.') };
}

/** Membership-backed attributes: a group's members and a user's groups, looked up in scim_group_members. */
function membership(scope: FilterScope, root: AttributeDefinition): { own: string; other: string } | undefined {
  if (scope.kind.type === 'Group' && root.name === 'members') return { own: 'group_id', other: 'user_id' };
  if (scope.kind.type === 'User' && root.name === 'groups') return { own: 'user_id', other: 'group_id' };
  return undefined;
}

/**
 * Every set below holds ids of the account's resources only (each leaf is scoped to the account, and
 * intersect, union and except keep that), so the list needs no other condition to stay in the account.
 */
const everyone = (scope: FilterScope): Sql => sql`select id from ${sql.raw(scope.table)} where account_id = ${scope.accountId}`;

/** The resources of the account except those of `set`. */
const allBut = (scope: FilterScope, set: Sql): Sql => sql`${everyone(scope)} except select id from (${set}) as excluded`;

/** The resources with a membership row meeting `condition` (on columns of m, the membership row). */
function withMembership(scope: FilterScope, member: { own: string; other: string }, condition: Sql): Sql {
  return sql`select m.${sql.raw(member.own)} as id from scim_group_members m join ${sql.raw(scope.table)} r on r.id = m.${sql.raw(member.own)} where r.account_id = ${scope.accountId} and ${condition}`;
}

function valueRows(scope: FilterScope, condition: Sql): Sql {
  return sql`select resource_id, element from scim_values where account_id = ${scope.accountId} and resource_type = ${scope.kind.type} and ${condition}`;
}

/** The condition a comparison puts on scim_values rows. */
function valueCondition(scope: FilterScope, node: Comparison, found: Target): Sql {
  if (node.op === 'pr') {
    if (found.leaf.type !== 'complex') return sql`attribute = ${found.attribute}`;
    const prefix = `${found.attribute}.`;
    return sql`substr(attribute, 1, ${lengthOf(prefix)}) = ${prefix}`;
  }
  if (found.leaf.type === 'complex') throw invalidFilter(`${node.attrPath} is complex: compare one of its sub-attributes.`);
  return sql`attribute = ${found.attribute} and ${comparedWith(scope, sql.ref('value'), found.leaf, node)}`;
}

/** Whether the value is null, which SCIM reads as "not present". */
const isNull = (node: Comparison): boolean => node.op !== 'pr' && node.compValue === null;

function comparison(scope: FilterScope, node: Comparison): Sql {
  const found = target(scope, node.attrPath, { whole: node.op === 'pr' });
  if (isNull(node)) {
    if (node.op !== 'eq' && node.op !== 'ne') throw invalidFilter(`${node.attrPath}: null compares with eq or ne only.`);
    const present = comparison(scope, { op: 'pr', attrPath: node.attrPath });
    return node.op === 'eq' ? allBut(scope, present) : present;
  }
  // ne is "not eq": a resource without the attribute meets it too.
  if (node.op === 'ne') return allBut(scope, comparison(scope, { ...node, op: 'eq' }));
  const member = membership(scope, found.root);
  if (member) {
    const any = node.op === 'pr' && found.leaf === found.root;
    if (found.leaf.name !== 'value' && !any) throw invalidFilter(`Only ${found.root.name}.value can be filtered on.`);
    const column = sql.raw(`m.${member.other}`);
    return withMembership(scope, member, node.op === 'pr' ? sql`1 = 1` : comparedWith(scope, column, found.leaf, node));
  }
  const column = META_COLUMNS[found.attribute];
  if (column) {
    if (node.op === 'pr') return everyone(scope);
    return sql`${everyone(scope)} and ${comparedWith(scope, sql.raw(column), found.leaf, node)}`;
  }
  return sql`select resource_id as id from scim_values where account_id = ${scope.accountId} and resource_type = ${scope.kind.type} and ${valueCondition(scope, node, found)}`;
}

/** The (resource, element) pairs of a multi-valued attribute whose elements meet `node`. */
function elements(scope: FilterScope, root: AttributeDefinition, node: Filter): Sql {
  switch (node.op) {
    case 'and':
    case 'or': {
      const parts = node.filters.map(
        (f, i) => sql`select resource_id, element from (${elements(scope, root, f)}) as ${sql.raw(`e${i}`)}`,
      );
      return sql.join(parts, sql.raw(node.op === 'and' ? ' intersect ' : ' union '));
    }
    case 'not': {
      const prefix = `${root.name.toLowerCase()}.`;
      const all = valueRows(scope, sql`substr(attribute, 1, ${lengthOf(prefix)}) = ${prefix}`);
      return sql`${all} except select resource_id, element from (${elements(scope, root, node.filter)}) as n`;
    }
    case '[]':
      throw invalidFilter('A value filter cannot hold another value filter.');
    default: {
      if (isNull(node) || node.op === 'ne') {
        const inverse = node.op === 'ne' ? { ...node, op: 'eq' as const } : { op: 'pr' as const, attrPath: node.attrPath };
        return elements(scope, root, { op: 'not', filter: inverse });
      }
      return valueRows(scope, valueCondition(scope, node, target(scope, node.attrPath, { within: root })));
    }
  }
}

/** A value filter on a membership-backed attribute (`members[value eq "..."]`): a condition on one membership row. */
export function membershipCondition(scope: FilterScope, root: AttributeDefinition, column: string, node: Filter): Sql {
  switch (node.op) {
    case 'and':
    case 'or':
      return sql`(${sql.join(
        node.filters.map((f) => membershipCondition(scope, root, column, f)),
        sql.raw(` ${node.op} `),
      )})`;
    case 'not':
      return sql`not (${membershipCondition(scope, root, column, node.filter)})`;
    case '[]':
      throw invalidFilter('A value filter cannot hold another value filter.');
    default: {
      const found = target(scope, node.attrPath, { within: root });
      if (found.leaf.name !== 'value') throw invalidFilter(`Only ${root.name}.value can be filtered on.`);
      if (node.op === 'pr') return sql`1 = 1`;
      if (node.compValue === null) return sql`1 = ${node.op === 'eq' ? 0 : 1}`;
      const matched = comparedWith(scope, sql.raw(column), found.leaf, node);
      return node.op === 'ne' ? sql`not (${matched})` : matched;
    }
  }
}

/** The ids of the account's resources that meet the filter. */
function compiled(scope: FilterScope, node: Filter): Sql {
  switch (node.op) {
    case 'and':
    case 'or':
      return sql.join(
        node.filters.map((f) => sql`select id from (${compiled(scope, f)}) as operand`),
        sql.raw(node.op === 'and' ? ' intersect ' : ' union '),
      );
    case 'not':
      return allBut(scope, compiled(scope, node.filter));
    case '[]': {
      const root = definitionAt(scope.kind, pathSegments(scope.kind, node.attrPath));
      if (!root?.multiValued || root.type !== 'complex') {
        throw invalidFilter(`${node.attrPath} is not a multi-valued complex attribute.`);
      }
      const member = membership(scope, root);
      if (member) return withMembership(scope, member, membershipCondition(scope, root, `m.${member.other}`, node.valFilter));
      return sql`select resource_id as id from (${elements(scope, root, node.valFilter)}) as matched`;
    }
    default:
      return comparison(scope, node);
  }
}

/**
 * The filter as a condition on the resource table: its id in the set of those that meet it (a set of the
 * account's resources only).
 */
export function filterCondition(scope: FilterScope, filter: Filter): RawBuilder<SqlBool> {
  return sql<SqlBool>`${sql.raw(`${scope.table}.id`)} in (${compiled(scope, filter)})`;
}

/**
 * What a list is sorted by (RFC 7644 3.4.2.3): one stored value per resource. For a multi-valued attribute,
 * the value of its primary element if that has one, else of its first element that has one (scim_values keeps
 * each value's element, the position in the stored array, and the element's `primary` as a row of its own).
 */
export function sortKey(scope: FilterScope, sortBy: string): RawBuilder<unknown> {
  const found = target(scope, sortBy, { sorting: true });
  if (found.leaf.type === 'complex' || membership(scope, found.root)) throw invalidSort(`${sortBy} cannot be sorted by.`);
  const column = META_COLUMNS[found.attribute];
  if (column) return sql.raw(`${scope.table}.${column}`);
  const id = sql.raw(`${scope.table}.id`);
  if (!found.root.multiValued) {
    return sql`(select min(value) from scim_values where resource_id = ${id} and attribute = ${found.attribute})`;
  }
  const primary = found.root.subAttributes?.some((s) => s.name === 'primary')
    ? `${found.root.name.toLowerCase()}.primary`
    : undefined;
  if (!primary) {
    return sql`(select value from scim_values where resource_id = ${id} and attribute = ${found.attribute} order by element limit 1)`;
  }
  return sql`(select v.value from scim_values v left join scim_values p on p.resource_id = v.resource_id and p.attribute = ${primary} and p.element = v.element and p.value = 'true' where v.resource_id = ${id} and v.attribute = ${found.attribute} order by p.value is null, v.element limit 1)`;
}
