/**
 * SCIM resources between the wire and the store: what a client sends is checked against the schema
 * definitions and reduced to a document; a stored document is rendered back with id, schemas and meta,
 * flattened into searchable values, and cut down to the attributes a client asked for.
 */
import { ProblemError } from '../../core/problems.ts';
import {
  GROUP_EXTENSION_SCHEMA,
  attributeNamed,
  attributesOfSchema,
  definitionAt,
  groupExtensionAttributes,
  pathSegments,
  type AttributeDefinition,
  type ResourceKind,
} from './definitions.ts';

export type Document = Record<string, unknown>;

/** A SCIM error: its HTTP status, RFC 7644 scimType and detail, answered in the format the client asked for. */
export function scimError(status: number, scimType: string | undefined, detail: string): ProblemError {
  return new ProblemError(status, detail, scimType ? { scimType } : {});
}

export const invalidValue = (detail: string) => scimError(400, 'invalidValue', detail);

/** Longest string value kept (binary values aside): long enough for any attribute, short enough to index. */
const MAX_TEXT = 512;
const MAX_BINARY = 16_384;
/** Most values a multi-valued attribute of a user may hold (group members are counted apart). */
const MAX_VALUES = 100;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function find(definitions: AttributeDefinition[], name: string): AttributeDefinition | undefined {
  const lower = name.toLowerCase();
  return definitions.find((d) => d.name.toLowerCase() === lower);
}

/**
 * Attributes whose canonical values are the only ones taken (a group's role): matched in any case and kept
 * as the canonical value, so `"ADMIN"` is stored `"admin"`. Other canonical values (emails' type) are hints.
 */
const closedValues = new Set(groupExtensionAttributes.filter((a) => a.name === 'role'));

/** One value of `definition` (one element of a multi-valued one), checked and in canonical form; undefined for null (unassigned). */
export function checkedValue(definition: AttributeDefinition, value: unknown, at: string): unknown {
  if (value === null || value === undefined) return undefined;
  switch (definition.type) {
    case 'boolean':
      if (typeof value === 'boolean') return value;
      // Some providers (Microsoft Entra) send booleans as "True"/"False".
      if (typeof value === 'string' && /^(true|false)$/i.test(value)) return value.toLowerCase() === 'true';
      throw invalidValue(`${at} must be a boolean.`);
    case 'dateTime': {
      const time = typeof value === 'string' ? new Date(value) : undefined;
      if (!time || Number.isNaN(time.getTime())) throw invalidValue(`${at} must be an RFC 3339 date-time.`);
      return time.toISOString();
    }
    case 'complex': {
      if (!isObject(value)) throw invalidValue(`${at} must be an object.`);
      const result: Document = {};
      for (const [key, item] of Object.entries(value)) {
        const sub = find(definition.subAttributes ?? [], key);
        if (!sub || sub.mutability === 'readOnly') continue;
        const checked = checkedValue(sub, item, `${at}.${sub.name}`);
        if (checked !== undefined) result[sub.name] = checked;
      }
      return Object.keys(result).length > 0 ? result : undefined;
    }
    default: {
      if (typeof value !== 'string') throw invalidValue(`${at} must be a string.`);
      // A lone surrogate is no character: PostgreSQL would store it as U+FFFD and SQLite as it is.
      if (/\p{Cs}/u.test(value)) throw invalidValue(`${at} holds a lone surrogate (not well-formed Unicode).`);
      const limit = definition.type === 'binary' ? MAX_BINARY : MAX_TEXT;
      if (value.length > limit) throw invalidValue(`${at} must be at most ${limit} characters.`);
      if (closedValues.has(definition)) {
        const canonical = definition.canonicalValues?.find((c) => c.toLowerCase() === value.toLowerCase());
        if (canonical === undefined) throw invalidValue(`${at} must be one of ${definition.canonicalValues?.join(', ')}.`);
        return canonical;
      }
      return value;
    }
  }
}

/** An attribute's value, single or multi-valued, checked; undefined when unassigned. */
export function checkedAttribute(definition: AttributeDefinition, value: unknown, at = definition.name): unknown {
  if (!definition.multiValued) return checkedValue(definition, value, at);
  if (value === null || value === undefined) return undefined;
  if (!Array.isArray(value)) throw invalidValue(`${at} must be an array.`);
  if (value.length > MAX_VALUES) throw invalidValue(`${at} may hold at most ${MAX_VALUES} values.`);
  const items = value.map((item, i) => checkedValue(definition, item, `${at}[${i}]`)).filter((item) => item !== undefined);
  // RFC 7643 2.4: the primary attribute value true MUST appear no more than once.
  const primaries = items.filter((item) => isObject(item) && item.primary === true).length;
  if (primaries > 1) throw invalidValue(`${at}: at most one value may be primary, ${primaries} are.`);
  return items.length > 0 ? items : undefined;
}

export interface Incoming {
  document: Document;
  /** The clear-text password sent, if any (to be hashed, never stored as is). */
  password?: string;
  /** The members sent (groups), as given: checked against the account's users by the repository. */
  members?: unknown[];
}

/**
 * A resource as a client sent it (POST, PUT, or the result of a PATCH), reduced to the attributes this
 * server keeps: names in canonical case, values checked, read-only and unknown attributes ignored (RFC 7643
 * 2.2 and 7), extension attributes taken from their extension object or from the top level. An extension
 * object holds only that extension's attributes: any other name in it is ignored, so it never sets a core
 * attribute; where it and the top level both give an extension attribute, the extension object's wins.
 */
export function incoming(kind: ResourceKind, body: unknown): Incoming {
  if (!isObject(body)) throw scimError(400, 'invalidSyntax', 'The resource must be a JSON object.');
  const given = new Map<AttributeDefinition, unknown>();
  const fromExtension = new Set<AttributeDefinition>();
  for (const [key, value] of Object.entries(body)) {
    const extension = kind.extensions.find((urn) => urn.toLowerCase() === key.toLowerCase());
    if (extension) {
      if (value === null) continue; // unassigned (RFC 7643 2.5)
      if (!isObject(value)) throw invalidValue(`${extension} must be an object.`);
      const own = attributesOfSchema(kind, extension);
      for (const [name, item] of Object.entries(value)) {
        const definition = find(own, name);
        if (!definition) continue;
        given.set(definition, item);
        fromExtension.add(definition);
      }
    } else {
      const definition = attributeNamed(kind, key);
      if (definition && !fromExtension.has(definition)) given.set(definition, value);
    }
  }
  const result: Incoming = { document: {} };
  for (const [definition, value] of given) {
    if (definition.mutability === 'readOnly' || definition.name === 'meta') continue;
    if (definition.name === 'password') {
      if (value === null || value === undefined) continue;
      if (typeof value !== 'string' || value.length === 0 || value.length > 256) {
        throw invalidValue('password must be a string of 1 to 256 characters.');
      }
      result.password = value;
    } else if (definition.name === 'members') {
      if (value === null || value === undefined) continue;
      if (!Array.isArray(value)) throw invalidValue('members must be an array.');
      result.members = value;
    } else {
      const checked = checkedAttribute(definition, value);
      if (checked !== undefined) result.document[definition.name] = checked;
    }
  }
  for (const definition of kind.attributes) {
    const value = result.document[definition.name];
    if (definition.required && (typeof value !== 'string' || value.trim() === '')) {
      throw invalidValue(`${definition.name} is required.`);
    }
  }
  return result;
}

/** A value as filters compare it: lower case unless the attribute is case-exact. */
export function comparable(definition: AttributeDefinition, value: string | boolean): string {
  if (typeof value === 'boolean') return String(value);
  return definition.caseExact ? value : value.toLowerCase();
}

export interface SearchValue {
  attribute: string;
  element: number;
  value: string;
}

/** Every leaf value of a document, as filters look them up (binary values are not searchable). */
export function searchValues(kind: ResourceKind, document: Document, id: string): SearchValue[] {
  const rows: SearchValue[] = [{ attribute: 'id', element: 0, value: id }];
  const add = (definition: AttributeDefinition, path: string, element: number, value: unknown) => {
    if (definition.type === 'binary' || value === undefined || value === null) return;
    if (definition.type === 'complex' && isObject(value)) {
      for (const sub of definition.subAttributes ?? []) add(sub, `${path}.${sub.name.toLowerCase()}`, element, value[sub.name]);
    } else if (typeof value === 'string' || typeof value === 'boolean') {
      rows.push({ attribute: path, element, value: comparable(definition, value) });
    }
  };
  for (const definition of kind.attributes) {
    const value = document[definition.name];
    if (definition.name === 'id' || value === undefined) continue;
    if (definition.multiValued && Array.isArray(value)) {
      value.forEach((item, i) => add(definition, definition.name.toLowerCase(), i, item));
    } else {
      add(definition, definition.name.toLowerCase(), 0, value);
    }
  }
  return rows;
}

export interface Meta {
  id: string;
  version: number;
  createdAt: string;
  lastModified: string;
}

export function etagOf(version: number): string {
  return `W/"${version}"`;
}

/** Whether an If-Match or If-None-Match header names `version` (or is `*`); weak comparison, as versions are weak tags. */
export function etagListNames(header: string, version: number): boolean {
  if (header.trim() === '*') return true;
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === `"${version}"`);
}

/**
 * The resource as answered: schemas, id, the document, what the caller adds (members, groups, derived
 * fields), and meta. A group's extension fields are answered only in their extension object, as RFC 7643
 * 3.3 places them (strict SCIM clients refuse them at the top level); writes take them in either place.
 */
export function rendered(kind: ResourceKind, meta: Meta, document: Document, added: Document, location: string): Document {
  const { externalId, ...rest } = document;
  const resource: Document = {
    schemas: [kind.schema, ...kind.extensions],
    id: meta.id,
    ...(externalId !== undefined && { externalId }),
    ...rest,
    ...added,
  };
  if (kind.extensions.includes(GROUP_EXTENSION_SCHEMA)) {
    const extension: Document = {};
    for (const { name } of groupExtensionAttributes) {
      if (resource[name] !== undefined) extension[name] = resource[name];
      delete resource[name];
    }
    resource[GROUP_EXTENSION_SCHEMA] = extension;
  }
  resource.meta = {
    resourceType: kind.type,
    created: meta.createdAt,
    lastModified: meta.lastModified,
    location,
    version: etagOf(meta.version),
  };
  return resource;
}

/** Attribute paths of `attributes` or `excludedAttributes`: top-level name to the sub-attributes named (empty: all). */
function pathTree(kind: ResourceKind, list: string): Map<string, Set<string>> {
  const tree = new Map<string, Set<string>>();
  for (const raw of list.split(',')) {
    const path = raw.trim();
    if (!path) continue;
    if ([kind.schema, ...kind.extensions].some((urn) => urn.toLowerCase() === path.toLowerCase())) {
      for (const d of path.toLowerCase() === kind.schema.toLowerCase() ? kind.attributes : groupExtensionAttributes) {
        tree.set(d.name.toLowerCase(), new Set());
      }
      continue;
    }
    const [root, sub, ...deeper] = pathSegments(kind, path).map((s) => s.toLowerCase());
    // schemas is answered always, as id is: naming it changes nothing.
    if (root === 'schemas' && sub === undefined) continue;
    if (!definitionAt(kind, sub === undefined ? [root] : [root, sub]) || deeper.length > 0) {
      throw scimError(400, 'invalidPath', `${path} is not an attribute of a ${kind.type}.`);
    }
    const named = tree.get(root);
    if (!sub) tree.set(root, new Set());
    else if (!named) tree.set(root, new Set([sub]));
    else if (named.size > 0) named.add(sub);
  }
  return tree;
}

function pick(value: unknown, subs: Set<string>, keep: boolean): unknown {
  if (subs.size === 0) return keep ? value : undefined;
  const cut = (item: unknown) =>
    isObject(item) ? Object.fromEntries(Object.entries(item).filter(([k]) => subs.has(k.toLowerCase()) === keep)) : item;
  return Array.isArray(value) ? value.map(cut) : cut(value);
}

/** Checks the attributes a write asks to see before it writes: a bad list must not fail after the write committed. */
export function checkProjection(
  kind: ResourceKind,
  { attributes, excludedAttributes }: { attributes?: string; excludedAttributes?: string },
) {
  for (const list of [attributes, excludedAttributes]) if (list) pathTree(kind, list);
}

/** Which attributes are answered (RFC 7644 3.9): `attributes` keeps only those named, `excludedAttributes` drops them; schemas and id always stay. */
export function projected(kind: ResourceKind, resource: Document, attributes?: string, excluded?: string): Document {
  const list = attributes || excluded;
  if (!list) return resource;
  // attributes wins over excludedAttributes (RFC 7644 3.9), but a bad path in either is refused.
  if (attributes && excluded) pathTree(kind, excluded);
  const keep = Boolean(attributes);
  const tree = pathTree(kind, list);
  const cut = (object: Document): Document => {
    const result: Document = {};
    for (const [key, value] of Object.entries(object)) {
      const lower = key.toLowerCase();
      if (key === 'schemas' || key === 'id') result[key] = value;
      else if (kind.extensions.some((urn) => urn === key) && isObject(value)) {
        const extension = cut(value);
        if (Object.keys(extension).length > 0) result[key] = extension;
      } else if (tree.has(lower)) {
        const picked = pick(value, tree.get(lower)!, keep);
        if (picked !== undefined) result[key] = picked;
      } else if (!keep) result[key] = value;
    }
    return result;
  };
  return cut(resource);
}
