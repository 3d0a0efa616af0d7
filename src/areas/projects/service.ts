/**
 * The projects' rules: a project of another account is answered as one that does not exist, names are
 * unique in the account, how a project is shown, and the paged lists of a project's items (read from the
 * nearer end, remembered until the store changes). The SQL is the repository's (repository.ts).
 */
import { randomUUID } from 'node:crypto';
import type { Db, Executor, Trx } from '../../core/db/database.ts';
import { isUniqueViolation, now, statementsAreRoundTrips } from '../../core/db/database.ts';
import { rememberedRead } from '../../core/db/remembered.ts';
import { conflict, notFound } from '../../core/problems.ts';
import { offsetOf, pageOf, pageWindow, type PageQuery } from '../../core/paging.ts';
import {
  accountPages,
  accountTotal,
  deleteProjectRow,
  insertProject,
  projectListStatements,
  projectOfAccount,
  type ProjectListQueries,
  type ProjectRow,
} from './repository.ts';
import type { CreateProjectRequest, Project } from './schemas.ts';

function toProject(row: ProjectRow): Project {
  return {
    id: row.id,
    name: row.name,
    ...(row.description !== null && { description: row.description }),
    createdAt: row.createdAt,
  };
}

/**
 * The project `projectId` of the caller's account, or a 404: a project of another account is
 * answered exactly as one that does not exist. Every area checks its project through this.
 */
export async function requireProject(db: Executor, accountId: string, projectId: string): Promise<Project> {
  const project = await projectAsRemembered(db, accountId, projectId);
  if (!project) throw notFound(`Project ${projectId} does not exist.`);
  return project;
}

const projectAsRemembered = rememberedRead(async (db, accountId: string, projectId: string) => {
  const [row] = await projectOfAccount(db, { projectId, accountId });
  return row && toProject(row);
});

/** Runs `write` in one transaction, once the project is found to be of the caller's account. */
export function writeInProject<T>(db: Db, accountId: string, projectId: string, write: (trx: Trx) => Promise<T>): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await requireProject(trx, accountId, projectId);
    return write(trx);
  });
}

/** A page of what `list` finds in a project, once the project is found to be of the caller's account. */
export async function pageInProject<Q extends PageQuery, T>(
  db: Db,
  accountId: string,
  projectId: string,
  query: Q,
  list: (db: Db, projectId: string, query: Q) => Promise<{ results: T[]; total: number }>,
) {
  await requireProject(db, accountId, projectId);
  const { results, total } = await list(db, projectId, query);
  return pageOf(query, results, total);
}

export interface ProjectListOptions<Row extends { name: string }, Item> extends ProjectListQueries<Row> {
  toItem(row: Row): Item;
}

/**
 * On PostgreSQL, pages that start within this many items of the list's start are read forwards in one
 * statement with the project check and the total, whatever the list's length: walking this far costs
 * less than a second round trip.
 */
const FORWARD_READ_LIMIT = 1000;

/**
 * A paged list of a project's items in name order, in compiled-once statements: the project in the
 * caller's account and its total first, then the page, read from the nearer end of the list. On
 * PostgreSQL a page near the start (the usual one) is one statement doing both; on SQLite, where a
 * statement is a call and not a round trip, the two cost less than one that joins them (75 against
 * 110 µs, measured: SQLite materializes the joined page). Pages are remembered until the store changes
 * (rememberedRead); a project that is not the caller's is a 404.
 */
export function projectList<Row extends { name: string }, Item>(options: ProjectListOptions<Row, Item>) {
  const { projectWithFirstPage, projectWithTotal, pages } = projectListStatements(options);
  // Remembered per page and size alone: other query parameters do not change the page. A missing project
  // reads as undefined, which is never remembered.
  const remembered = rememberedRead(async (db, accountId: string, projectId: string, page: number, size: number) => {
    const query = { page, size };
    if (statementsAreRoundTrips(db) && offsetOf(query) <= FORWARD_READ_LIMIT) {
      const rows = await projectWithFirstPage(db, { projectId, accountId, limit: query.size, offset: offsetOf(query) });
      if (rows.length === 0) return undefined;
      // A project with no item on this page answers one row whose item columns are all null.
      const items = rows.filter((row) => row.name !== null);
      return pageOf(query, items.map(options.toItem), Number(rows[0].total ?? 0));
    }
    const [project] = await projectWithTotal(db, { projectId, accountId });
    if (!project) return undefined;
    const total = Number(project.total ?? 0);
    const window = pageWindow(query, total);
    if (!window) return pageOf(query, [], total);
    const rows = await pages[Number(window.descending)](db, { projectId, limit: window.limit, offset: window.offset });
    if (window.descending) rows.reverse();
    return pageOf(query, rows.map(options.toItem), total);
  });
  return async (db: Executor, accountId: string, projectId: string, query: PageQuery) => {
    const page = await remembered(db, accountId, projectId, query.page, query.size);
    if (!page) throw notFound(`Project ${projectId} does not exist.`);
    return page;
  };
}

/** Creates a project in the account; its id. A name taken in the account is a 409. */
export async function createProject(
  db: Executor,
  accountId: string,
  createdBy: string,
  request: CreateProjectRequest,
): Promise<string> {
  const id = randomUUID();
  try {
    await insertProject(db, {
      id,
      accountId,
      name: request.name,
      description: request.description ?? null,
      createdBy,
      createdAt: now(),
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`A project named "${request.name}" already exists in this account.`);
    throw error;
  }
  return id;
}

// Remembered per page and size alone: other query parameters do not change the page.
const accountProjects = rememberedRead(async (db, accountId: string, page: number, size: number) => {
  const query = { page, size };
  const [{ total }] = await accountTotal(db, { accountId });
  const window = pageWindow(query, Number(total));
  if (!window) return pageOf(query, [], Number(total));
  const rows = await accountPages[Number(window.descending)](db, { accountId, limit: window.limit, offset: window.offset });
  if (window.descending) rows.reverse();
  return pageOf(query, rows.map(toProject), Number(total));
});

/**
 * A page of the account's projects in name order, read from the nearer end of the list; remembered
 * until the store changes. Answered as it is (the page is kept serialized with it).
 */
export const listProjects = (db: Executor, accountId: string, query: PageQuery) =>
  accountProjects(db, accountId, query.page, query.size);

/** Removes the project; everything attached to it goes with it (foreign keys cascade). A 404 when there is none. */
export async function deleteProject(db: Executor, accountId: string, projectId: string): Promise<void> {
  if (!(await deleteProjectRow(db, accountId, projectId))) throw notFound(`Project ${projectId} does not exist.`);
}
