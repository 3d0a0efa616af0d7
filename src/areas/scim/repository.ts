import type { RawBuilder, SqlBool } from 'kysely';
import type { Db, Dialect, Executor, Trx } from '../../core/db/database.ts';
import { now, sql } from '../../core/db/database.ts';
import type { SearchValue } from './resources.ts';

/**
 * The directory's SQL: users, groups, memberships and the searchable values of the SCIM service
 * (service.ts holds the rules: versions, preconditions, uniqueness, what an answer shows).
 */

export interface UserRow {
  id: string;
  document: string;
  version: number;
  createdAt: string;
  lastModified: string;
}

export interface GroupRow {
  id: string;
  document: string;
  projectId: string | null;
  version: number;
  createdAt: string;
  lastModified: string;
}

export type ResourceTable = 'scimUsers' | 'scimGroups';

const CHUNK = 500;
/** `items` in slices small enough for one `in (...)` list on either store. */
export function* chunks<T>(items: T[]): Generator<T[]> {
  for (let i = 0; i < items.length; i += CHUNK) yield items.slice(i, i + CHUNK);
}

// ---- One writer per account's directory

/*
 * The writes to one account's directory go one at a time, as all writes do on SQLite: a write moves the
 * versions of the resources whose answers show what it changed (a user's groups, a group's members), so
 * two writes side by side would lock each other's rows in opposite orders and deadlock on PostgreSQL, or,
 * skipping locked rows, leave a version behind its answer. Across processes an advisory lock per account
 * (PostgreSQL) orders them; within a process they queue here first, without holding a store connection,
 * so that one busy account cannot take every connection of the pool from the others.
 */
const directoryQueues = new Map<string, Promise<unknown>>();

/** Runs `work` in a transaction holding the account's directory lock, after the account's earlier writes. */
export function directoryTransaction<T>(db: Db, dialect: Dialect, accountId: string, work: (trx: Trx) => Promise<T>): Promise<T> {
  const before = directoryQueues.get(accountId) ?? Promise.resolve();
  const run = before.then(() =>
    db.transaction().execute(async (trx) => {
      await lockDirectory(trx, dialect, accountId);
      return work(trx);
    }),
  );
  const done = run.catch(() => undefined);
  directoryQueues.set(accountId, done);
  void done.then(() => {
    if (directoryQueues.get(accountId) === done) directoryQueues.delete(accountId);
  });
  return run;
}

/** Takes the account's directory lock for the rest of the transaction (PostgreSQL; SQLite has one writer). */
async function lockDirectory(trx: Trx, dialect: Dialect, accountId: string): Promise<void> {
  if (dialect === 'postgres') {
    await sql`select pg_advisory_xact_lock(hashtext(${`dpc-directory:${accountId}`}))`.execute(trx);
  }
}

// ---- Searchable values and versions

/** The resource's searchable values become `rows` (filters are compiled to queries on them). */
export async function replaceSearchValues(
  trx: Trx,
  accountId: string,
  resourceType: string,
  resourceId: string,
  rows: readonly SearchValue[],
): Promise<void> {
  await trx.deleteFrom('scimValues').where('resourceId', '=', resourceId).execute();
  const values = rows.map((row) => ({ ...row, resourceId, accountId, resourceType }));
  for (let i = 0; i < values.length; i += 200) {
    await trx
      .insertInto('scimValues')
      .values(values.slice(i, i + 200))
      .execute();
  }
}

const touched = (time: string) => ({ version: sql<number>`version + 1`, lastModified: time });

/** The ids of a group's members, or of a user's groups (a subquery for touch). */
export const membershipIds = (trx: Trx, of: { groupId: string } | { userId: string }) =>
  'groupId' in of
    ? trx.selectFrom('scimGroupMembers').select('userId as id').where('groupId', '=', of.groupId)
    : trx.selectFrom('scimGroupMembers').select('groupId as id').where('userId', '=', of.userId);

/** Moves the version of the rows of `ids` (the directory lock keeps this from deadlocking). */
export async function touch(
  trx: Trx,
  table: ResourceTable,
  ids: string[] | ReturnType<typeof membershipIds>,
  time: string,
): Promise<void> {
  // Typed as one of the two tables: the columns used here are the same in both.
  await trx
    .updateTable(table as 'scimUsers')
    .set(touched(time))
    .where('id', 'in', ids)
    .execute();
}

// ---- Users

export function findUserRow(db: Executor, accountId: string, id: string): Promise<UserRow | undefined> {
  return db
    .selectFrom('scimUsers')
    .select(['id', 'document', 'version', 'createdAt', 'lastModified'])
    .where('accountId', '=', accountId)
    .where('id', '=', id)
    .executeTakeFirst();
}

export interface UserColumns {
  userName: string;
  userNameKey: string;
  displayName: string | null;
  document: string;
}

export async function insertUser(
  trx: Trx,
  accountId: string,
  row: UserRow & UserColumns,
  passwordHash: string | null,
): Promise<void> {
  await trx
    .insertInto('scimUsers')
    .values({ ...row, accountId, passwordHash })
    .execute();
}

export async function updateUser(
  trx: Trx,
  id: string,
  set: UserColumns & Pick<UserRow, 'version' | 'lastModified'> & { passwordHash?: string | null },
): Promise<void> {
  await trx.updateTable('scimUsers').set(set).where('id', '=', id).execute();
}

export async function userHasPassword(trx: Trx, userId: string): Promise<boolean> {
  const row = await trx.selectFrom('scimUsers').select('passwordHash').where('id', '=', userId).executeTakeFirstOrThrow();
  return row.passwordHash !== null;
}

/** Deletes the user and its searchable values; its memberships go with it (foreign keys cascade). */
export async function deleteUserRows(trx: Trx, id: string): Promise<void> {
  await trx.deleteFrom('scimValues').where('resourceId', '=', id).execute();
  await trx.deleteFrom('scimUsers').where('id', '=', id).execute();
}

/** The groups of each of `userIds`, by display name. */
export function groupsOfUsers(db: Executor, userIds: string[]) {
  return db
    .selectFrom('scimGroupMembers')
    .innerJoin('scimGroups', 'scimGroups.id', 'scimGroupMembers.groupId')
    .select(['scimGroupMembers.userId', 'scimGroups.id', 'scimGroups.displayName'])
    .where('scimGroupMembers.userId', 'in', userIds)
    .orderBy('scimGroups.displayName')
    .execute();
}

/** The ones of `ids` that are users of the account. */
export async function knownUserIds(db: Executor, accountId: string, ids: string[]): Promise<Set<string>> {
  const known = new Set<string>();
  for (const chunk of chunks(ids)) {
    const rows = await db
      .selectFrom('scimUsers')
      .select('id')
      .where('accountId', '=', accountId)
      .where('id', 'in', chunk)
      .execute();
    for (const row of rows) known.add(row.id);
  }
  return known;
}

// ---- Groups

export function findGroupRow(db: Executor, accountId: string, id: string): Promise<GroupRow | undefined> {
  return db
    .selectFrom('scimGroups')
    .select(['id', 'document', 'projectId', 'version', 'createdAt', 'lastModified'])
    .where('accountId', '=', accountId)
    .where('id', '=', id)
    .executeTakeFirst();
}

export interface GroupColumns {
  displayName: string;
  document: string;
  projectId: string | null;
  role: string | null;
}

export async function insertGroup(trx: Trx, accountId: string, row: GroupRow & GroupColumns): Promise<void> {
  await trx
    .insertInto('scimGroups')
    .values({ ...row, accountId })
    .execute();
}

export async function updateGroup(
  trx: Trx,
  id: string,
  set: Partial<GroupColumns> & Pick<GroupRow, 'version' | 'lastModified'>,
): Promise<void> {
  await trx.updateTable('scimGroups').set(set).where('id', '=', id).execute();
}

export async function deleteGroupRows(trx: Trx, id: string): Promise<void> {
  await trx.deleteFrom('scimValues').where('resourceId', '=', id).execute();
  await trx.deleteFrom('scimGroups').where('id', '=', id).execute();
}

/** The members of each of `groupIds` with their display (display name, else user name), in the key's order. */
export function membersOfGroups(db: Executor, groupIds: string[]) {
  // In the membership key's order (group, user id): read straight off the index, no sort of a large group.
  return db
    .selectFrom('scimGroupMembers')
    .innerJoin('scimUsers', 'scimUsers.id', 'scimGroupMembers.userId')
    .select((eb) => [
      'scimGroupMembers.groupId',
      'scimGroupMembers.userId',
      eb.fn.coalesce('scimUsers.displayName', 'scimUsers.userName').as('display'),
    ])
    .where('scimGroupMembers.groupId', 'in', groupIds)
    .orderBy('scimGroupMembers.groupId')
    .orderBy('scimGroupMembers.userId')
    .execute();
}

export async function accountName(db: Executor, accountId: string): Promise<string | undefined> {
  const account = await db.selectFrom('accounts').select('name').where('id', '=', accountId).executeTakeFirst();
  return account?.name;
}

// ---- Memberships

/** The ones of `userIds` that are members of the group. */
export async function membersAmong(trx: Trx, groupId: string, userIds: string[]): Promise<string[]> {
  const rows = await trx
    .selectFrom('scimGroupMembers')
    .select('userId')
    .where('groupId', '=', groupId)
    .where('userId', 'in', userIds)
    .execute();
  return rows.map((row) => row.userId);
}

export async function insertMembers(trx: Trx, groupId: string, userIds: string[]): Promise<void> {
  await trx
    .insertInto('scimGroupMembers')
    .values(userIds.map((userId) => ({ groupId, userId })))
    .execute();
}

export async function deleteMembers(trx: Trx, groupId: string, userIds: string[]): Promise<void> {
  await trx.deleteFrom('scimGroupMembers').where('groupId', '=', groupId).where('userId', 'in', userIds).execute();
}

/** The group's member ids, all of them or those meeting a condition on user_id. */
export async function memberIdsWhere(trx: Trx, groupId: string, condition?: RawBuilder<unknown>): Promise<string[]> {
  let query = trx.selectFrom('scimGroupMembers').select('userId').where('groupId', '=', groupId);
  if (condition) query = query.where(condition as never);
  return (await query.execute()).map((row) => row.userId);
}

/**
 * A new version of the account's groups that name the project, which is being deleted (in `trx`): their
 * answers lose its projectName, and their grants lapse. Registered with the projects area's deletion.
 */
export async function projectLeavesGroups(trx: Trx, dialect: Dialect, accountId: string, projectId: string): Promise<void> {
  // A directory write too: no group write of the account may read the version this one moves.
  await lockDirectory(trx, dialect, accountId);
  await trx
    .updateTable('scimGroups')
    .set(touched(now()))
    .where('accountId', '=', accountId)
    .where('projectId', '=', projectId)
    .execute();
}

/** The (project, role) grants of the groups a user is in that name both. */
export function grantRowsOf(db: Executor, userId: string) {
  return db
    .selectFrom('scimGroupMembers')
    .innerJoin('scimGroups', 'scimGroups.id', 'scimGroupMembers.groupId')
    .select(['scimGroups.projectId as projectId', 'scimGroups.role as role', 'scimGroups.id as groupId'])
    .where('scimGroupMembers.userId', '=', userId)
    .where('scimGroups.role', 'is not', null)
    .where('scimGroups.projectId', 'is not', null)
    .execute();
}

// ---- Pages

export interface PageSpec {
  accountId: string;
  /** The compiled filter: it holds only the account's resources (no filter: all of the account's). */
  condition?: RawBuilder<SqlBool>;
  /** The sort key, resources without a value last either way (both stores alike). */
  order?: RawBuilder<unknown>;
  descending: boolean;
  count: number;
  offset: number;
}

/** A page of a resource table's rows and the number of rows matching. */
export async function pageRows(db: Db, table: ResourceTable, spec: PageSpec): Promise<{ rows: unknown[]; total: number }> {
  const matching = () => {
    // Typed as one of the two tables: the columns used here are the same in both.
    const q = db.selectFrom(table as 'scimGroups');
    // A filter's set holds only the account's resources; the store then reads them by primary key
    // instead of walking every resource of the account to test each against the set.
    return spec.condition ? q.where(spec.condition) : q.where('accountId', '=', spec.accountId);
  };
  const ordered = () => {
    const q = matching().selectAll();
    return spec.order ? q.orderBy(sql`(${spec.order}) is null`).orderBy(spec.order, spec.descending ? 'desc' : 'asc') : q;
  };
  const [rows, total] = await Promise.all([
    spec.count === 0 ? [] : ordered().orderBy('createdAt').orderBy('id').limit(spec.count).offset(spec.offset).execute(),
    matching()
      .select((eb) => eb.fn.countAll<number>().as('total'))
      .executeTakeFirstOrThrow(),
  ]);
  return { rows, total: Number(total.total) };
}
