/**
 * PATCH (RFC 7644 3.5.2) of a resource's document: operations add, remove and replace, with or without a
 * path, paths with value filters (`emails[type eq "work"].value`). Operations are applied in order to a
 * copy; the caller checks the result as a whole and writes it, or nothing when any operation fails.
 */
import type { Filter } from 'scim2-parse-filter';
import { PATCH_OP_SCHEMA, attributesOfSchema, definitionAt, type AttributeDefinition, type ResourceKind } from './definitions.ts';
import { parseFilter } from './filter.ts';
import { checkedValue, comparable, invalidValue, scimError, type Document } from './resources.ts';

export type PatchOpName = 'add' | 'remove' | 'replace';

export interface PatchPath {
  text: string;
  root: AttributeDefinition;
  filter?: Filter;
  sub?: AttributeDefinition;
}

export interface PatchOperation {
  op: PatchOpName;
  /** Undefined without a path; null for a path of a schema this server does not implement (ignored). */
  path?: PatchPath | null;
  value?: unknown;
}

const invalidPath = (detail: string) => scimError(400, 'invalidPath', detail);
const noTarget = (detail: string) => scimError(400, 'noTarget', detail);
const invalidSyntax = (detail: string) => scimError(400, 'invalidSyntax', detail);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const PATH_SHAPE = /^([A-Za-z$][\w$-]*)(?:\[(.*)\])?(?:\.([A-Za-z$][\w$-]*))?$/s;

/** A PATCH path: attribute, optional value filter, optional sub-attribute; null for another schema's attribute. */
export function parsePath(kind: ResourceKind, text: string): PatchPath | null {
  let rest = text.trim();
  const urns = [kind.schema, ...kind.extensions];
  const urn = urns.find((u) => rest.toLowerCase().startsWith(`${u.toLowerCase()}:`));
  if (urns.some((u) => u.toLowerCase() === rest.toLowerCase())) {
    throw invalidPath(`"${text}" names a schema, not an attribute: send its attributes in an operation without a path.`);
  }
  if (urn) rest = rest.slice(urn.length + 1);
  // An attribute of an extension this server does not implement (say the enterprise User) is ignored, as on POST.
  else if (/^urn:/i.test(rest)) return null;
  const match = PATH_SHAPE.exec(rest);
  if (!match) throw invalidPath(`"${text}" is not a valid attribute path.`);
  const [, rootName, filterText, subName] = match;
  const root = definitionAt(kind, [rootName]);
  // A schema URN prefix names an attribute of that schema only: the extension's URN never reaches a core attribute.
  if (!root || (urn && !attributesOfSchema(kind, urn).includes(root))) {
    throw invalidPath(`"${rootName}" is not an attribute of ${urn ?? `a ${kind.type}`}.`);
  }
  if (root.mutability === 'readOnly') throw scimError(400, 'mutability', `${root.name} is read-only.`);
  if (filterText !== undefined && !(root.multiValued && root.type === 'complex')) {
    throw invalidPath(`${root.name} is not multi-valued: it takes no value filter.`);
  }
  const sub = subName === undefined ? undefined : definitionAt(kind, [rootName, subName]);
  if (subName !== undefined && !sub) throw invalidPath(`"${subName}" is not a sub-attribute of ${root.name}.`);
  return { text, root, sub, filter: filterText === undefined ? undefined : parseFilter(filterText) };
}

/** The body of a PATCH request, checked: the PatchOp schema and well-formed operations. */
export function patchOperations(kind: ResourceKind, body: unknown): PatchOperation[] {
  if (!isObject(body)) throw invalidSyntax('The body must be a PatchOp message.');
  const schemas = body.schemas;
  if (!Array.isArray(schemas) || !schemas.includes(PATCH_OP_SCHEMA)) {
    throw invalidSyntax(`schemas must contain ${PATCH_OP_SCHEMA}.`);
  }
  const operations = body.Operations ?? body.operations;
  if (!Array.isArray(operations) || operations.length === 0) throw invalidSyntax('Operations must be a non-empty array.');
  if (operations.length > 1000) throw invalidSyntax('At most 1000 operations are taken in one request.');
  return operations.map((operation, i) => {
    if (!isObject(operation)) throw invalidSyntax(`Operations[${i}] must be an object.`);
    const op = typeof operation.op === 'string' ? operation.op.toLowerCase() : '';
    if (op !== 'add' && op !== 'remove' && op !== 'replace') {
      throw invalidSyntax(`Operations[${i}].op must be add, remove or replace.`);
    }
    if (operation.path !== undefined && typeof operation.path !== 'string') {
      throw invalidPath(`Operations[${i}].path must be a string.`);
    }
    if (operation.path === undefined && op === 'remove') throw noTarget(`Operations[${i}]: remove needs a path.`);
    if (op !== 'remove' && operation.value === undefined) throw scimError(400, 'invalidValue', `Operations[${i}] needs a value.`);
    return {
      op,
      path: operation.path === undefined ? undefined : parsePath(kind, operation.path),
      value: operation.value,
    };
  });
}

function field(object: Record<string, unknown>, definition: AttributeDefinition): unknown {
  const key = Object.keys(object).find((k) => k.toLowerCase() === definition.name.toLowerCase());
  return key === undefined ? undefined : object[key];
}

/** Whether one element of a multi-valued attribute meets a value filter. */
export function elementMatches(root: AttributeDefinition, element: unknown, filter: Filter): boolean {
  if (!isObject(element)) return false;
  switch (filter.op) {
    case 'and':
      return filter.filters.every((f) => elementMatches(root, element, f));
    case 'or':
      return filter.filters.some((f) => elementMatches(root, element, f));
    case 'not':
      return !elementMatches(root, element, filter.filter);
    case '[]':
      throw scimError(400, 'invalidFilter', 'A value filter cannot hold another value filter.');
    default: {
      const sub = root.subAttributes?.find((s) => s.name.toLowerCase() === filter.attrPath.toLowerCase());
      if (!sub) throw scimError(400, 'invalidFilter', `"${filter.attrPath}" is not a sub-attribute of ${root.name}.`);
      const actual = field(element, sub);
      if (filter.op === 'pr') return actual !== undefined && actual !== null;
      const expected = filter.compValue;
      if (expected === null) return filter.op === 'eq' ? actual == null : actual != null;
      if (typeof actual !== typeof expected || (typeof actual !== 'string' && typeof actual !== 'boolean')) {
        return filter.op === 'ne';
      }
      const a = comparable(sub, actual as string | boolean);
      const b = comparable(sub, expected as string | boolean);
      switch (filter.op) {
        case 'eq':
          return a === b;
        case 'ne':
          return a !== b;
        case 'co':
          return a.includes(b);
        case 'sw':
          return a.startsWith(b);
        case 'ew':
          return a.endsWith(b);
        case 'gt':
          return a > b;
        case 'ge':
          return a >= b;
        case 'lt':
          return a < b;
        case 'le':
          return a <= b;
      }
    }
  }
}

/** The sub-attribute values a filter of equalities pins (`type eq "work"`), to create the element it names; undefined otherwise. */
function pinned(filter: Filter): Record<string, unknown> | undefined {
  if (filter.op === 'eq') return { [filter.attrPath]: filter.compValue };
  if (filter.op !== 'and') return undefined;
  const parts = filter.filters.map(pinned);
  return parts.every(Boolean) ? Object.assign({}, ...parts) : undefined;
}

const asList = (value: unknown): unknown[] => (Array.isArray(value) ? value : [value]);

/** Two values of one (sub-)attribute compared as stored: strings as its caseExact says; an unassigned boolean is false. */
function sameLeaf(definition: AttributeDefinition, a: unknown, b: unknown): boolean {
  if (definition.type === 'boolean') return (a ?? false) === (b ?? false);
  if (a === undefined || a === null || b === undefined || b === null) return (a ?? null) === (b ?? null);
  if (typeof a === 'string' && typeof b === 'string') return comparable(definition, a) === comparable(definition, b);
  return a === b;
}

/**
 * Whether two values of a multi-valued attribute are the same value ("if the value already exists", RFC 7644
 * 3.5.2.1): every sub-attribute equal, whatever the order or case of the names; both are in stored form.
 */
function sameElement(root: AttributeDefinition, a: unknown, b: unknown): boolean {
  if (root.type !== 'complex') return sameLeaf(root, a, b);
  if (!isObject(a) || !isObject(b)) return false;
  return (root.subAttributes ?? []).every((sub) => sameLeaf(sub, field(a, sub), field(b, sub)));
}

/** The values of a multi-valued attribute an operation sends, checked and in stored form (names canonical, "True" a boolean). */
function storedElements(root: AttributeDefinition, value: unknown): unknown[] {
  return asList(value)
    .map((item, i) => checkedValue(root, item, `${root.name}[${i}]`))
    .filter((item) => item !== undefined);
}

/** What an add or replace writes into a complex value: sub-attributes set (checked, canonical names) and removed (sent as null). */
interface SubPatch {
  set: Document;
  unset: string[];
}

/** The sub-attributes of a complex value sent for `definition` (RFC 7644 3.5.2.3: those not named are left unchanged). */
function subPatch(definition: AttributeDefinition, value: unknown, at: string): SubPatch {
  if (!isObject(value)) throw invalidValue(`The value for ${at} must be an object.`);
  const set = (checkedValue(definition, value, at) as Document | undefined) ?? {};
  const unset = Object.entries(value)
    .filter(([, item]) => item === null)
    .flatMap(([key]) => definition.subAttributes?.filter((s) => s.name.toLowerCase() === key.toLowerCase()) ?? [])
    .map((s) => s.name);
  return { set, unset };
}

/** One sub-attribute's new value as a patch: set, or removed when the value is null. */
function onePatch(sub: AttributeDefinition, value: unknown, at: string): SubPatch {
  const checked = checkedValue(sub, value, at);
  return checked === undefined ? { set: {}, unset: [sub.name] } : { set: { [sub.name]: checked }, unset: [] };
}

/** `base` with a patch applied: sub-attributes set in place (their order kept), new ones last, those unset gone. */
function merged(base: unknown, { set, unset }: SubPatch): Document {
  const removed = new Set(unset.map((name) => name.toLowerCase()));
  const pending = new Map(Object.keys(set).map((name) => [name.toLowerCase(), name]));
  const result: Document = {};
  for (const [key, value] of Object.entries(isObject(base) ? base : {})) {
    const lower = key.toLowerCase();
    const name = pending.get(lower);
    if (name !== undefined) {
      result[name] = set[name];
      pending.delete(lower);
    } else if (!removed.has(lower)) result[key] = value;
  }
  for (const name of pending.values()) result[name] = set[name];
  return result;
}

const isPrimary = (item: unknown) => isObject(item) && item.primary === true;

/**
 * RFC 7644 3.5.2: when an add or replace makes a value primary, the server sets primary false on the others.
 * `touched` are the indexes of the values the operation wrote; two of them primary are left for the check
 * of the whole attribute to refuse.
 */
function demoted(root: AttributeDefinition, list: unknown[], touched: Set<number>): unknown[] {
  if (!root.subAttributes?.some((s) => s.name === 'primary')) return list;
  if (![...touched].some((i) => isPrimary(list[i]))) return list;
  return list.map((item, i) => (!touched.has(i) && isPrimary(item) ? { ...(item as Document), primary: false } : item));
}

function applyToList(operation: PatchOperation, path: PatchPath, current: unknown[]): unknown[] | undefined {
  const { op, value } = operation;
  const { root, filter, sub } = path;
  if (!filter && !sub) {
    // A replace of the whole attribute: the list becomes what was sent (checked as a whole by the caller).
    if (op === 'replace') return asList(value);
    if (op === 'remove' && value === undefined) return undefined;
    const values = storedElements(root, value);
    if (op === 'remove') return current.filter((item) => !values.some((v) => sameElement(root, item, v)));
    const next = [...current];
    const touched = new Set<number>();
    for (const item of values) {
      let index = next.findIndex((existing) => sameElement(root, existing, item));
      // The same value sent as primary: the one there becomes primary rather than having a copy beside it.
      if (index < 0 && isPrimary(item)) {
        index = next.findIndex((existing) => sameElement(root, existing, { ...(item as Document), primary: false }));
        if (index >= 0) next[index] = { ...(next[index] as Document), primary: true };
      }
      if (index < 0) index = next.push(item) - 1;
      touched.add(index);
    }
    return demoted(root, next, touched);
  }
  const matches = filter ? current.map((item) => elementMatches(root, item, filter)) : current.map(() => true);
  if (op === 'remove') {
    if (!sub) return current.filter((_, i) => !matches[i]);
    return current.map((item, i) => (matches[i] && isObject(item) ? withoutKey(item, sub.name) : item));
  }
  // Only the sub-attributes named change; the others of each matching value are left as they were.
  const patch = sub ? onePatch(sub, value, `${root.name}.${sub.name}`) : subPatch(root, value, path.text);
  if (!matches.some(Boolean)) {
    const seed = filter ? pinned(filter) : {};
    if (!seed) throw noTarget(`No value of ${root.name} matches "${path.text}".`);
    const created = merged(checkedValue(root, seed, path.text), patch);
    return demoted(root, [...current, created], new Set([current.length]));
  }
  const next = current.map((item, i) => (matches[i] ? merged(item, patch) : item));
  return demoted(root, next, new Set(matches.flatMap((m, i) => (m ? [i] : []))));
}

function withoutKey(object: Record<string, unknown>, key: string): Record<string, unknown> {
  return Object.fromEntries(Object.entries(object).filter(([k]) => k.toLowerCase() !== key.toLowerCase()));
}

/** Applies one operation with a path to the document (in place). */
export function applyAtPath(document: Document, operation: PatchOperation, path: PatchPath): void {
  const { root, sub } = path;
  const { op, value } = operation;
  if (root.multiValued) {
    const current = Array.isArray(document[root.name]) ? (document[root.name] as unknown[]) : [];
    const next = applyToList(operation, path, current);
    if (next === undefined || next.length === 0) delete document[root.name];
    else document[root.name] = next;
    return;
  }
  const existing = document[root.name];
  if (root.type === 'complex') {
    if (op === 'remove') {
      if (sub && isObject(existing)) document[root.name] = withoutKey(existing, sub.name);
      else if (!sub) delete document[root.name];
      return;
    }
    // add and replace alike set the sub-attributes sent and leave the others (RFC 7644 3.5.2.1, 3.5.2.3).
    const patch = sub ? onePatch(sub, value, `${root.name}.${sub.name}`) : subPatch(root, value, root.name);
    document[root.name] = merged(existing, patch);
    return;
  }
  if (sub) throw invalidPath(`${root.name} has no sub-attributes.`);
  if (op === 'remove') delete document[root.name];
  else document[root.name] = value;
}

/**
 * The operations of a path-less add or replace: one per attribute of the value object (its keys may be
 * attribute paths, and an extension's attributes may sit in their extension object).
 */
export function expandedWithoutPath(kind: ResourceKind, operation: PatchOperation, extension?: string): PatchOperation[] {
  if (!isObject(operation.value)) throw scimError(400, 'invalidValue', `A ${operation.op} without a path needs an object value.`);
  const result: PatchOperation[] = [];
  for (const [key, value] of Object.entries(operation.value)) {
    if (key === 'schemas' && !extension) continue;
    const inner = extension ? undefined : kind.extensions.find((urn) => urn.toLowerCase() === key.toLowerCase());
    if (inner && isObject(value)) {
      result.push(...expandedWithoutPath(kind, { op: operation.op, value }, inner));
      continue;
    }
    let path: PatchPath | null;
    try {
      // Within an extension object a key names that extension's attributes only, as its URN prefix would.
      path = parsePath(kind, extension ? `${extension}:${key}` : key);
    } catch {
      // Keys that are no attribute of ours are ignored, as unknown attributes are on POST and PUT.
      continue;
    }
    if (path) result.push({ op: operation.op, path, value });
  }
  return result;
}
