import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { Db, Dialect, Executor, Trx } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { hashSecret } from '../../core/auth/secrets.ts';
import { ROLES, isRole } from '../../core/auth/accounts.ts';
import { GROUP, MAX_RESULTS, USER, type ResourceKind } from './definitions.ts';
import { filterCondition, membershipCondition, parseFilter, sortKey, type FilterScope } from './filter.ts';
import { applyAtPath, expandedWithoutPath, patchOperations, type PatchOperation } from './patch.ts';
import {
  etagListNames,
  etagOf,
  incoming,
  invalidValue,
  projected,
  rendered,
  scimError,
  searchValues,
  type Document,
  type Incoming,
} from './resources.ts';
import type { ListQuery } from './schemas.ts';
import { projectNamesById } from '../projects/index.ts';
import {
  accountName,
  chunks,
  deleteGroupRows,
  deleteMembers,
  deleteUserRows,
  directoryTransaction,
  findGroupRow,
  findUserRow,
  grantRowsOf,
  groupsOfUsers,
  insertGroup,
  insertMembers,
  insertUser,
  knownUserIds,
  memberIdsWhere,
  membersAmong,
  membersOfGroups,
  membershipIds,
  pageRows,
  replaceSearchValues,
  touch,
  updateGroup,
  updateUser,
  userHasPassword,
  type GroupRow,
  type UserRow,
} from './repository.ts';

/*
 * The SCIM service's rules (RFC 7643/7644): versions and preconditions, uniqueness, members and what an
 * answer shows. The SQL is in repository.ts.
 */

/** Who asks and how answers address resources: the account, the store's dialect, the service's base URL. */
export interface Scope {
  db: Db;
  dialect: Dialect;
  accountId: string;
  /** Absolute URL of /scim/v2, for meta.location and $ref. */
  base: string;
}

/** What the client asked to see (RFC 7644 3.9). */
export interface Projection {
  attributes?: string;
  excludedAttributes?: string;
}

export interface Answer {
  resource: Document;
  version: number;
}

const notFound = (kind: ResourceKind, id: string) => scimError(404, undefined, `${kind.type} ${id} does not exist.`);

function checkPrecondition(ifMatch: string | undefined, version: number): void {
  if (ifMatch !== undefined && !etagListNames(ifMatch, version)) {
    throw scimError(412, undefined, `The resource is at version ${etagOf(version)}, not ${ifMatch}.`);
  }
}

/** Whether the client will see an attribute, so work for it (members, groups) is done only when it is. */
function wants(kind: ResourceKind, projection: Projection, name: string): boolean {
  return name in projected(kind, { [name]: true }, projection.attributes, projection.excludedAttributes);
}

function writeValues(trx: Trx, scope: Scope, kind: ResourceKind, id: string, document: Document): Promise<void> {
  return replaceSearchValues(trx, scope.accountId, kind.type, id, searchValues(kind, document, id));
}

// ---- Versions of derived answers

/*
 * Answers show other resources: a group's members carry each user's display name, a user's groups each
 * group's displayName. A change there is a new version here too, so that a version (and its ETag) names
 * one answer: If-None-Match never answers 304 for a changed answer, If-Match never lets a write pass
 * over a change the client has not seen.
 */
/** A write to the account's directory: one at a time per account (see directoryTransaction). */
function directoryWrite<T>(scope: Scope, work: (trx: Trx) => Promise<T>): Promise<T> {
  return directoryTransaction(scope.db, scope.dialect, scope.accountId, work);
}

// ---- Users

async function groupsOf(db: Executor, scope: Scope, userIds: string[]): Promise<Map<string, Document[]>> {
  const result = new Map<string, Document[]>();
  if (userIds.length === 0) return result;
  for (const row of await groupsOfUsers(db, userIds)) {
    const list = result.get(row.userId) ?? [];
    list.push({ value: row.id, $ref: `${scope.base}/Groups/${row.id}`, display: row.displayName, type: 'DIRECT' });
    result.set(row.userId, list);
  }
  return result;
}

async function renderUsers(db: Executor, scope: Scope, rows: UserRow[], projection: Projection): Promise<Answer[]> {
  const groups = wants(USER, projection, 'groups')
    ? await groupsOf(
        db,
        scope,
        rows.map((r) => r.id),
      )
    : new Map();
  return rows.map((row) => {
    const memberships = groups.get(row.id);
    const resource = rendered(
      USER,
      row,
      JSON.parse(row.document) as Document,
      memberships ? { groups: memberships } : {},
      `${scope.base}/Users/${row.id}`,
    );
    return {
      resource: projected(USER, resource, projection.attributes, projection.excludedAttributes),
      version: row.version,
    };
  });
}

async function requireUserRow(db: Executor, scope: Scope, id: string): Promise<UserRow> {
  const row = await findUserRow(db, scope.accountId, id);
  if (!row) throw notFound(USER, id);
  return row;
}

export async function getUser(scope: Scope, id: string, projection: Projection): Promise<Answer> {
  const [answer] = await renderUsers(scope.db, scope, [await requireUserRow(scope.db, scope, id)], projection);
  return answer;
}

function userColumns(document: Document) {
  const userName = document.userName as string;
  return {
    userName,
    userNameKey: userName.toLowerCase(),
    displayName: typeof document.displayName === 'string' ? document.displayName : null,
    document: JSON.stringify(document),
  };
}

const duplicateUserName = (userName: string) =>
  scimError(409, 'uniqueness', `A user with userName "${userName}" already exists in this account.`);

/** A write that a unique userName refuses answers 409 uniqueness. */
async function uniquely<T>(userName: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (isUniqueViolation(error)) throw duplicateUserName(userName);
    throw error;
  }
}

export async function createUser(scope: Scope, body: unknown, projection: Projection): Promise<Answer> {
  const { document, password } = incoming(USER, body);
  const passwordHash = password === undefined ? null : await hashSecret(password);
  const id = randomUUID();
  const time = now();
  const row = { id, version: 1, createdAt: time, lastModified: time, ...userColumns(document) };
  await uniquely(row.userName, () =>
    directoryWrite(scope, async (trx) => {
      await insertUser(trx, scope.accountId, row, passwordHash);
      await writeValues(trx, scope, USER, id, document);
    }),
  );
  const [answer] = await renderUsers(scope.db, scope, [row], projection);
  return answer;
}

/** Whether a stored document and a new one hold the same (the order of an object's keys aside). */
const sameDocument = (stored: Document, next: Document): boolean => isDeepStrictEqual(stored, next);

/** Writes a user's new document (PUT, PATCH) as its next version, unless nothing changed. */
async function rewriteUser(
  trx: Trx,
  scope: Scope,
  current: UserRow,
  next: Incoming,
  passwordHash: string | null | undefined,
): Promise<UserRow> {
  const columns = userColumns(next.document);
  const stored = JSON.parse(current.document) as Document;
  // Nothing changed (a PATCH adding what is there, a PUT of what a GET answered): the version stays
  // (RFC 7644 3.5.2.1). Removing a password that was never set changes nothing either.
  const passwordChanged = passwordHash !== undefined && (passwordHash !== null || (await userHasPassword(trx, current.id)));
  if (sameDocument(stored, next.document) && !passwordChanged) return current;
  const updated = { ...current, ...columns, version: current.version + 1, lastModified: now() };
  await uniquely(columns.userName, () =>
    updateUser(trx, current.id, {
      ...columns,
      version: updated.version,
      lastModified: updated.lastModified,
      ...(passwordHash !== undefined && { passwordHash }),
    }),
  );
  await writeValues(trx, scope, USER, current.id, next.document);
  const before = userColumns(stored);
  if ((before.displayName ?? before.userName) !== (columns.displayName ?? columns.userName)) {
    await touch(trx, 'scimGroups', membershipIds(trx, { userId: current.id }), updated.lastModified);
  }
  return updated;
}

/** PUT: the user becomes what was sent; a password left out is kept (RFC 7644 3.5.1 leaves write-only attributes alone). */
export async function replaceUser(scope: Scope, id: string, body: unknown, ifMatch: string | undefined, projection: Projection) {
  const next = incoming(USER, body);
  const passwordHash = next.password === undefined ? undefined : await hashSecret(next.password);
  const row = await directoryWrite(scope, async (trx) => {
    const current = await requireUserRow(trx, scope, id);
    checkPrecondition(ifMatch, current.version);
    return rewriteUser(trx, scope, current, next, passwordHash);
  });
  const [answer] = await renderUsers(scope.db, scope, [row], projection);
  return answer;
}

/** The password a PATCH sets (replace/add) or removes (null), or undefined when it does not touch it. */
function patchedPassword(operations: PatchOperation[]): string | null | undefined {
  let password: string | null | undefined;
  for (const operation of operations) {
    if (operation.path?.root.name !== 'password') continue;
    if (operation.op === 'remove') password = null;
    else if (typeof operation.value === 'string' && operation.value.length > 0 && operation.value.length <= 256) {
      password = operation.value;
    } else throw invalidValue('password must be a string of 1 to 256 characters.');
  }
  return password;
}

/** Path-less operations spread into one per attribute; those of other schemas' attributes dropped. */
function withPaths(kind: ResourceKind, operations: PatchOperation[]): PatchOperation[] {
  return operations.flatMap((operation) =>
    operation.path === undefined ? expandedWithoutPath(kind, operation) : operation.path === null ? [] : [operation],
  );
}

export async function patchUser(scope: Scope, id: string, body: unknown, ifMatch: string | undefined, projection: Projection) {
  const operations = withPaths(USER, patchOperations(USER, body));
  const password = patchedPassword(operations);
  const passwordHash = typeof password === 'string' ? await hashSecret(password) : password;
  const row = await directoryWrite(scope, async (trx) => {
    const current = await requireUserRow(trx, scope, id);
    checkPrecondition(ifMatch, current.version);
    const document = JSON.parse(current.document) as Document;
    for (const operation of operations) {
      if (operation.path && operation.path.root.name !== 'password') applyAtPath(document, operation, operation.path);
    }
    return rewriteUser(trx, scope, current, incoming(USER, document), passwordHash);
  });
  const [answer] = await renderUsers(scope.db, scope, [row], projection);
  return answer;
}

export async function deleteUser(scope: Scope, id: string, ifMatch: string | undefined): Promise<void> {
  await directoryWrite(scope, async (trx) => {
    const current = await requireUserRow(trx, scope, id);
    checkPrecondition(ifMatch, current.version);
    await touch(trx, 'scimGroups', membershipIds(trx, { userId: id }), now());
    await deleteUserRows(trx, id);
  });
}

// ---- Lists

function filterScope(scope: Scope, kind: ResourceKind): FilterScope {
  return {
    kind,
    accountId: scope.accountId,
    dialect: scope.dialect,
    table: kind === USER ? 'scim_users' : 'scim_groups',
  };
}

export interface ListAnswer {
  totalResults: number;
  startIndex: number;
  itemsPerPage: number;
  Resources: Document[];
}

/** The resource tables, which share the columns a page needs (id, accountId, createdAt). */
const TABLES = { User: 'scimUsers', Group: 'scimGroups' } as const;

/** A page of users or groups: the filter and sort compiled to SQL, the page cut by the store. */
async function page<Row>(
  scope: Scope,
  kind: ResourceKind,
  query: ListQuery,
  render: (rows: Row[]) => Promise<Answer[]>,
): Promise<ListAnswer> {
  const filters = filterScope(scope, kind);
  const condition = query.filter === undefined ? undefined : filterCondition(filters, parseFilter(query.filter));
  const order = query.sortBy === undefined ? undefined : sortKey(filters, query.sortBy);
  const startIndex = Math.max(1, query.startIndex ?? 1);
  const count = Math.min(MAX_RESULTS, Math.max(0, query.count ?? 100));
  const { rows, total } = await pageRows(scope.db, TABLES[kind.type], {
    accountId: scope.accountId,
    condition,
    order,
    descending: query.sortOrder === 'descending',
    count,
    // Past every row either way; a larger number is out of both stores' integer range.
    offset: Math.min(startIndex - 1, Number.MAX_SAFE_INTEGER),
  });
  const answers = await render(rows as Row[]);
  return {
    totalResults: total,
    // As asked, within what JSON prints as an integer (1e300 would print as 1e+300).
    startIndex: Math.min(startIndex, Number.MAX_SAFE_INTEGER),
    itemsPerPage: answers.length,
    Resources: answers.map((a) => a.resource),
  };
}

export function listUsers(scope: Scope, query: ListQuery): Promise<ListAnswer> {
  return page<UserRow>(scope, USER, query, (rows) => renderUsers(scope.db, scope, rows, query));
}

// ---- Groups

async function membersOf(db: Executor, scope: Scope, groupIds: string[]): Promise<Map<string, Document[]>> {
  const result = new Map<string, Document[]>();
  if (groupIds.length === 0) return result;
  const users = `${scope.base}/Users/`;
  for (const { groupId, userId, display } of await membersOfGroups(db, groupIds)) {
    let list = result.get(groupId);
    if (!list) result.set(groupId, (list = []));
    list.push({ value: userId, $ref: users + userId, display, type: 'USER' });
  }
  return result;
}

/** The fields a group derives from the account and its project: accountId, accountName, projectName. */
async function derivedFields(db: Executor, scope: Scope, rows: GroupRow[]): Promise<Map<string | null, Document>> {
  const name = await accountName(db, scope.accountId);
  const projectIds = [...new Set(rows.map((r) => r.projectId).filter((p): p is string => p !== null))];
  const projectNames = await projectNamesById(db, scope.accountId, projectIds);
  const common = { accountId: scope.accountId, accountName: name };
  const result = new Map<string | null, Document>([[null, common]]);
  for (const projectId of projectIds) {
    result.set(projectId, { ...common, projectName: projectNames.get(projectId) });
  }
  return result;
}

async function renderGroups(db: Executor, scope: Scope, rows: GroupRow[], projection: Projection): Promise<Answer[]> {
  const showMembers = wants(GROUP, projection, 'members');
  const members = showMembers
    ? await membersOf(
        db,
        scope,
        rows.map((r) => r.id),
      )
    : new Map<string, Document[]>();
  const derived = await derivedFields(db, scope, rows);
  return rows.map((row) => {
    const added: Document = { ...derived.get(row.projectId) };
    if (showMembers) added.members = members.get(row.id) ?? [];
    const resource = rendered(GROUP, row, JSON.parse(row.document) as Document, added, `${scope.base}/Groups/${row.id}`);
    return {
      resource: projected(GROUP, resource, projection.attributes, projection.excludedAttributes),
      version: row.version,
    };
  });
}

async function requireGroupRow(db: Executor, scope: Scope, id: string): Promise<GroupRow> {
  const row = await findGroupRow(db, scope.accountId, id);
  if (!row) throw notFound(GROUP, id);
  return row;
}

export async function getGroup(scope: Scope, id: string, projection: Projection): Promise<Answer> {
  const [answer] = await renderGroups(scope.db, scope, [await requireGroupRow(scope.db, scope, id)], projection);
  return answer;
}

/**
 * The group's columns from its document; a projectId must name a project of the account, a role be a
 * role. A projectId the group already has (`kept`) is not checked again: its project may have been
 * deleted since, and the group must stay writable (its grant is then void, see projectGrantsOf).
 */
async function groupColumns(db: Executor, scope: Scope, document: Document, kept: string | null = null) {
  const projectId = typeof document.projectId === 'string' ? document.projectId : null;
  if (projectId !== null && projectId !== kept) {
    const project = await projectNamesById(db, scope.accountId, [projectId]);
    if (!project.has(projectId)) throw invalidValue(`projectId ${projectId} is not a project of this account.`);
  }
  const role = typeof document.role === 'string' ? document.role : null;
  if (role !== null && !isRole(role)) throw invalidValue(`role must be one of ${ROLES.join(', ')}.`);
  return { displayName: document.displayName as string, document: JSON.stringify(document), projectId, role };
}

/** The user ids of members as sent ([{value}]), checked in shape only, each once. */
function memberValues(members: unknown): string[] {
  const list = Array.isArray(members) ? members : [members];
  const ids = list.map((member, i) => {
    const value = typeof member === 'object' && member !== null ? (member as Record<string, unknown>).value : undefined;
    if (typeof value !== 'string' || value.length === 0 || value.length > 64) {
      throw invalidValue(`members[${i}].value must be the id of a user.`);
    }
    const type = (member as Record<string, unknown>).type;
    if (type !== undefined && (typeof type !== 'string' || type.toUpperCase() !== 'USER')) {
      throw invalidValue(`members[${i}].type must be USER: groups do not nest here.`);
    }
    return value;
  });
  return [...new Set(ids)];
}

/** The user ids of members as sent ([{value}]); each must be a user of the account (400 otherwise). */
async function memberIds(db: Executor, scope: Scope, members: unknown): Promise<string[]> {
  const unique = memberValues(members);
  const known = await knownUserIds(db, scope.accountId, unique);
  const stranger = unique.find((id) => !known.has(id));
  if (stranger !== undefined) throw invalidValue(`${stranger} is not a user of this account.`);
  return unique;
}

/**
 * The users whose membership of a group a write changed, net: one added and removed again by the same
 * request changed nothing. Their versions move once, when the write is done (their groups changed).
 */
class MembershipChanges {
  private readonly before = new Map<string, boolean>();
  private readonly after = new Map<string, boolean>();

  record(userIds: string[], member: boolean): void {
    for (const id of userIds) {
      if (!this.before.has(id)) this.before.set(id, !member);
      this.after.set(id, member);
    }
  }

  /** Moves the changed users' versions; answers whether the members changed at all. */
  async touchChanged(trx: Trx, time: string): Promise<boolean> {
    const changed = [...this.after].filter(([id, member]) => this.before.get(id) !== member).map(([id]) => id);
    for (const chunk of chunks(changed)) await touch(trx, 'scimUsers', chunk, time);
    return changed.length > 0;
  }
}

/** Adds users to the group, those already in it left alone. Reads only the named users' rows, never the group's. */
async function addMembers(trx: Trx, groupId: string, userIds: string[], changes: MembershipChanges): Promise<void> {
  for (const chunk of chunks(userIds)) {
    const present = new Set(await membersAmong(trx, groupId, chunk));
    const added = chunk.filter((id) => !present.has(id));
    if (added.length === 0) continue;
    await insertMembers(trx, groupId, added);
    changes.record(added, true);
  }
}

/** Removes users from the group, those not in it ignored. */
async function removeMembers(trx: Trx, groupId: string, userIds: string[], changes: MembershipChanges): Promise<void> {
  for (const chunk of chunks(userIds)) {
    const removed = await membersAmong(trx, groupId, chunk);
    if (removed.length === 0) continue;
    await deleteMembers(trx, groupId, removed);
    changes.record(removed, false);
  }
}

/** The group's members become `userIds`: only the difference is written. */
async function replaceMembers(trx: Trx, groupId: string, userIds: string[], changes: MembershipChanges): Promise<void> {
  const wanted = new Set(userIds);
  const current = await memberIdsWhere(trx, groupId);
  await removeMembers(
    trx,
    groupId,
    current.filter((id) => !wanted.has(id)),
    changes,
  );
  await addMembers(trx, groupId, userIds, changes);
}

export async function createGroup(scope: Scope, body: unknown, projection: Projection): Promise<Answer> {
  const { document, members } = incoming(GROUP, body);
  const id = randomUUID();
  const time = now();
  const row = await directoryWrite(scope, async (trx) => {
    const columns = await groupColumns(trx, scope, document);
    const created = { id, ...columns, version: 1, createdAt: time, lastModified: time };
    await insertGroup(trx, scope.accountId, created);
    await writeValues(trx, scope, GROUP, id, document);
    if (members) {
      const changes = new MembershipChanges();
      await addMembers(trx, id, await memberIds(trx, scope, members), changes);
      await changes.touchChanged(trx, time);
    }
    return created;
  });
  const [answer] = await renderGroups(scope.db, scope, [row], projection);
  return answer;
}

/**
 * Writes the group's next version; its document and searchable values only when they
 * changed. A write that changed nothing, members included, leaves the version as it was (RFC 7644 3.5.2.1).
 */
async function rewriteGroup(
  trx: Trx,
  scope: Scope,
  current: GroupRow,
  document: Document,
  membersChanged: boolean,
  time: string,
): Promise<GroupRow> {
  const columns = await groupColumns(trx, scope, document, current.projectId);
  const stored = JSON.parse(current.document) as Document;
  const changed = !sameDocument(stored, document);
  if (!changed && !membersChanged) return current;
  const updated = { ...current, ...columns, version: current.version + 1, lastModified: time };
  await updateGroup(trx, current.id, { ...(changed && columns), version: updated.version, lastModified: updated.lastModified });
  if (changed) await writeValues(trx, scope, GROUP, current.id, document);
  if (columns.displayName !== stored.displayName) {
    await touch(trx, 'scimUsers', membershipIds(trx, { groupId: current.id }), time);
  }
  return updated;
}

export async function replaceGroup(scope: Scope, id: string, body: unknown, ifMatch: string | undefined, projection: Projection) {
  const next = incoming(GROUP, body);
  const row = await directoryWrite(scope, async (trx) => {
    const current = await requireGroupRow(trx, scope, id);
    checkPrecondition(ifMatch, current.version);
    const time = now();
    const changes = new MembershipChanges();
    await replaceMembers(trx, id, await memberIds(trx, scope, next.members ?? []), changes);
    const membersChanged = await changes.touchChanged(trx, time);
    return rewriteGroup(trx, scope, current, next.document, membersChanged, time);
  });
  const [answer] = await renderGroups(scope.db, scope, [row], projection);
  return answer;
}

/**
 * An operation on members, on the membership table: add (duplicates ignored) and remove by value touch
 * only the named users' rows, so their cost does not grow with the group; replace, remove all and
 * remove by value filter read the group's member ids.
 */
async function patchMembers(
  trx: Trx,
  scope: Scope,
  groupId: string,
  operation: PatchOperation,
  changes: MembershipChanges,
): Promise<void> {
  const path = operation.path!;
  if (path.sub || (path.filter && operation.op !== 'remove')) {
    throw scimError(400, 'invalidPath', `members are added and replaced whole; "${path.text}" names part of one.`);
  }
  if (path.filter) {
    const condition = membershipCondition(filterScope(scope, GROUP), path.root, 'user_id', path.filter);
    return removeMembers(trx, groupId, await memberIdsWhere(trx, groupId, condition), changes);
  }
  if (operation.op === 'remove') {
    // A user deleted since is still removed by its id (as Entra sends, after the fact): nothing to check but the shape.
    const ids = operation.value === undefined ? await memberIdsWhere(trx, groupId) : memberValues(operation.value);
    return removeMembers(trx, groupId, ids, changes);
  }
  const ids = await memberIds(trx, scope, operation.value);
  return operation.op === 'replace' ? replaceMembers(trx, groupId, ids, changes) : addMembers(trx, groupId, ids, changes);
}

/** E25: the operations in order, in one transaction; any failure leaves the group as it was. */
export async function patchGroup(scope: Scope, id: string, body: unknown, ifMatch: string | undefined, projection: Projection) {
  const operations = withPaths(GROUP, patchOperations(GROUP, body));
  const row = await directoryWrite(scope, async (trx) => {
    const current = await requireGroupRow(trx, scope, id);
    checkPrecondition(ifMatch, current.version);
    const document = JSON.parse(current.document) as Document;
    const time = now();
    const changes = new MembershipChanges();
    for (const operation of operations) {
      if (operation.path!.root.name === 'members') await patchMembers(trx, scope, id, operation, changes);
      else applyAtPath(document, operation, operation.path!);
    }
    const membersChanged = await changes.touchChanged(trx, time);
    return rewriteGroup(trx, scope, current, incoming(GROUP, document).document, membersChanged, time);
  });
  const [answer] = await renderGroups(scope.db, scope, [row], projection);
  return answer;
}

export async function deleteGroup(scope: Scope, id: string, ifMatch: string | undefined): Promise<void> {
  await directoryWrite(scope, async (trx) => {
    const current = await requireGroupRow(trx, scope, id);
    checkPrecondition(ifMatch, current.version);
    await touch(trx, 'scimUsers', membershipIds(trx, { groupId: id }), now());
    await deleteGroupRows(trx, id);
  });
}

export function listGroups(scope: Scope, query: ListQuery): Promise<ListAnswer> {
  return page<GroupRow>(scope, GROUP, query, (rows) => renderGroups(scope.db, scope, rows, query));
}

/**
 * The project roles a user holds through groups with a projectId and a role: exposed, not enforced, as
 * this server authorizes API clients, not directory users (see the README).
 */
export async function projectGrantsOf(scope: Scope, userId: string) {
  await requireUserRow(scope.db, scope, userId);
  const rows = await grantRowsOf(scope.db, userId);
  // A grant of a project that is gone (or not the account's) is void.
  const names = await projectNamesById(
    scope.db,
    scope.accountId,
    rows.map((row) => row.projectId!),
  );
  return rows
    .flatMap((row) => {
      const projectName = names.get(row.projectId!);
      return projectName === undefined ? [] : [{ projectId: row.projectId!, projectName, role: row.role!, groupId: row.groupId }];
    })
    .sort((a, b) => (a.projectName < b.projectName ? -1 : a.projectName > b.projectName ? 1 : 0));
}
