import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash } from 'node:crypto';
import fp from 'fastify-plugin';
import { sql } from 'kysely';
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import type { Db } from './db/database.ts';
import { badRequest, ProblemError } from './problems.ts';

const GUARDED_METHODS = new Set(['PUT', 'PATCH', 'DELETE']);

/** A strong entity tag of an answer's bytes (SHA-1, base64). */
export function entityTag(payload: string | Buffer): string {
  return `"${createHash('sha1').update(payload).digest('base64')}"`;
}

/** The tags of an If-None-Match or If-Match header: `*`, or a comma-separated list of (weak or strong) tags. */
function tagsOf(header: string): string[] {
  return header.match(/(?:W\/)?"[^"]*"|\*/g) ?? [];
}

const opaque = (tag: string) => tag.replace(/^W\//, '');

/**
 * The one row a write to a route changes, whose version a write with If-Match compares in the write itself
 * (`config.rowVersion` of the route). Its table has a `row_version` column that every UPDATE of the row moves
 * on (migrations 0038_row_versions and 0040_row_versions_everywhere).
 */
export interface VersionedRow {
  /** The table, as the code names it (camelCase). */
  table: string;
  /** The path parameter that is the row's `id`; or else `find`. */
  idParam?: string;
  /**
   * Finds the row the request writes where the path has no id (a name in the query or body, a key of two
   * columns): its identity, as the repository passes it to expectedRowVersion, and its version; undefined when
   * there is none. Where a GET answers the URL without a row too (a PUT that creates it), the version is
   * NO_ROW: If-Match naming that answer expects none, and the write inserts it or is a 412.
   */
  find?: (db: Db, request: FastifyRequest) => Promise<{ id: string; version: number } | undefined>;
}

/** The expected version of a row the check found absent: no row has it, so an UPDATE or DELETE comparing it is a 412. */
export const NO_ROW = -1;

declare module 'fastify' {
  interface FastifyRequest {
    /** The row version the request's If-Match check saw (config.rowVersion). */
    expectedVersion: VersionExpectation | null;
  }
}

/** The version of one row that a write with If-Match may change, as its check saw it. */
interface VersionExpectation {
  table: string;
  id: string;
  /** NO_ROW where the check found none (and the GET answered without it). */
  version: number;
  /** The write compared it once: later statements of the request change the row it changed. */
  used: boolean;
}

/** The handler of a write with If-Match on a versioned route runs with its expectation. */
const expectations = new AsyncLocalStorage<VersionExpectation>();

/**
 * The version of row `id` of `table` that the write running now must find, or undefined (no If-Match, or the
 * request already changed that row); NO_ROW where its check found no row (an insert then, whose unique
 * violation is a 412). The repository adds it to its UPDATE's or DELETE's WHERE, then tells
 * heldExpectedVersion whether a row matched.
 */
export function expectedRowVersion(table: string, id: string): number | undefined {
  const expected = expectations.getStore();
  return expected && !expected.used && expected.table === table && expected.id === id ? expected.version : undefined;
}

/** Whether the code running now is the write of a request with If-Match (whose check passed). */
export function writingWithIfMatch(): boolean {
  return expectations.getStore() !== undefined;
}

/**
 * After a write that compared expectedRowVersion: when no row had that version, another write came between the
 * request's check and its write (or the row is gone), and this is a 412 (thrown in the write's transaction,
 * which rolls back: nothing is done).
 */
export function heldExpectedVersion(table: string, id: string, held: boolean): void {
  const expected = expectations.getStore();
  if (!expected || expected.used || expected.table !== table || expected.id !== id) return;
  if (!held) throw lostUpdate();
  expected.used = true;
}

/**
 * Where a write reads its row before it decides, and may answer otherwise than by changing it (a 409 on a run
 * that has finished meanwhile, a 404 on a row that is gone, a 409 from a rule about the row): the version it
 * read, or undefined where it found no row. Another version than its check saw, or no row where the check saw
 * one, is a 412 at once; the write's own UPDATE or DELETE still compares (a write that lands after this read).
 */
export function checkExpectedVersion(table: string, id: string, version: number | undefined): void {
  const expected = expectations.getStore();
  if (!expected || expected.used || expected.table !== table || expected.id !== id) return;
  if (expected.version !== (version ?? NO_ROW)) throw lostUpdate();
}

function lostUpdate(): ProblemError {
  return new ProblemError(412, 'The resource changed since the version If-Match names: read it again, then send the change.', {
    violations: ['If-Match: does not name the current version'],
  });
}

/** The row's identity and version now, or undefined when there is no such row. */
async function versionedRowOf(db: Db, route: VersionedRow, request: FastifyRequest) {
  if (route.find) return route.find(db, request);
  const id = String((request.params as Record<string, unknown>)[route.idParam ?? 'id']);
  const { rows } = await sql<{
    version: number;
  }>`select row_version as version from ${sql.table(route.table)} where id = ${id}`.execute(db);
  return rows[0] === undefined ? undefined : { id, version: Number(rows[0].version) };
}

/**
 * Conditional requests for every area of the scope it is registered in (SCIM, which has its own, excepted):
 *
 * - Every answer with a body carries a strong `ETag` of it; resources and list pages alike.
 * - A GET or HEAD with `If-None-Match` naming it (or `*`; weak comparison, as RFC 9110 says) answers 304 with
 *   no body: a poller pays a round trip, not the answer.
 * - A PUT, PATCH or DELETE with `If-Match` is done only if the tag names the resource as a GET of the same
 *   URL answers it now (strong comparison; `*`: it exists), else 412 and nothing is done. The check reads
 *   the resource through the server itself (the same authorization), so one rule covers every area.
 * - Check and write agree through the row's version: every such route names the one row it changes
 *   (config.rowVersion); the check finds the version its tag is of, and the write changes the row only at that
 *   version (expectedRowVersion), so any write that comes between, with If-Match or without, on any instance,
 *   makes it a 412. No hold is taken. A route with a GET at its URL and no row named is refused at start.
 * - Where no GET answers the URL, If-Match is refused (400): there is no tag to name.
 */
export const conditionalRequestsPlugin = fp(async (app: FastifyInstance) => {
  app.decorateRequest('expectedVersion', null);
  const db = app.store.db;

  app.addHook('onSend', (request, reply, payload, done) => {
    if (!(typeof payload === 'string' || Buffer.isBuffer(payload))) return done(null, payload);
    let tag = reply.getHeader('etag') as string | undefined;
    if (!tag) {
      tag = entityTag(payload);
      reply.header('etag', tag);
    }
    const ifNoneMatch = request.headers['if-none-match'];
    const status = reply.statusCode;
    if (
      ifNoneMatch &&
      (request.method === 'GET' || request.method === 'HEAD') &&
      status >= 200 &&
      status < 300 &&
      !request.routeOptions.config.directoryIntegration
    ) {
      const tags = tagsOf(ifNoneMatch);
      if (tags.includes('*') || tags.some((candidate) => opaque(candidate) === opaque(tag))) {
        reply.code(304);
        return done(null, '');
      }
    }
    done(null, payload);
  });

  /** The ETag of what a GET of the request's URL answers now, or undefined when there is none (404, no GET). */
  const currentTag = async (request: FastifyRequest): Promise<string | undefined> => {
    const headers: Record<string, string> = {};
    // The caller's identity, and the address it reached (an answer may name URLs of the server: a hosted
    // repository's clone URL), so that the GET answers as it answered the caller.
    for (const name of ['authorization', 'account-id', 'host', 'x-forwarded-host', 'x-forwarded-proto']) {
      const value = request.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    const answer = await app.inject({ method: 'GET', url: request.url, headers });
    if (answer.statusCode !== 200) return undefined;
    const tag = answer.headers.etag;
    return typeof tag === 'string' ? tag : entityTag(answer.rawPayload);
  };

  const guard = async (request: FastifyRequest) => {
    const ifMatch = request.headers['if-match'];
    // SCIM keeps its own versions (its routes are marked by the SCIM area's own onRoute hook, which runs
    // after this plugin's, so the mark is read here, per request).
    if (typeof ifMatch !== 'string' || !request.principal || request.routeOptions.config.directoryIntegration) return;
    const versioned = request.routeOptions.config.rowVersion;
    // Where no GET answers the URL there is no ETag to name: refused, rather than a 412 no retry could pass.
    if (!versioned || !app.hasRoute({ method: 'GET', url: request.routeOptions.url ?? request.url })) {
      throw badRequest(
        'If-Match is not supported on this URL: no GET answers it, so it has no ETag to compare with. Send the request without If-Match.',
        ['If-Match: not supported on this URL (it has no GET)'],
      );
    }
    const tags = tagsOf(ifMatch);
    const matches = (current: string | undefined) =>
      current !== undefined &&
      (tags.includes('*') || tags.some((candidate) => !candidate.startsWith('W/') && candidate === current));
    const stale = (current: string | undefined) =>
      new ProblemError(
        412,
        current === undefined
          ? 'If-Match names a version of a resource that a GET of this URL does not answer (it does not exist).'
          : 'The resource changed since the version If-Match names: read it again, then send the change.',
        { violations: ['If-Match: does not name the current version'], headers: current ? { etag: current } : {} },
      );

    // The check finds the version the tag is of (the version on each side of the GET, the same: the GET
    // answered that version), and the write changes the row only at that version (expectedRowVersion), so any
    // write that comes between, with If-Match or without, makes it a 412.
    for (let attempt = 0; attempt < 5; attempt += 1) {
      const before = await versionedRowOf(db, versioned, request);
      const current = await currentTag(request);
      const after = await versionedRowOf(db, versioned, request);
      if (before?.id !== after?.id || before?.version !== after?.version) continue;
      if (!matches(current)) throw stale(current);
      if (after === undefined) throw stale(undefined);
      request.expectedVersion = { table: versioned.table, id: after.id, version: after.version, used: false };
      return;
    }
    throw stale(undefined);
  };

  // Every write of the scope with a GET at its URL names its row: one mechanism, or the server does not start.
  const unversioned: RouteOptions[] = [];
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (!methods.some((method) => GUARDED_METHODS.has(method)) || route.config?.directoryIntegration) return;
    route.preHandler = [guard, ...[route.preHandler ?? []].flat()];
    if (route.config?.rowVersion) {
      const handler = route.handler;
      route.handler = function (this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) {
        const expected = request.expectedVersion;
        return expected
          ? expectations.run(expected, () => handler.call(this, request, reply))
          : handler.call(this, request, reply);
      };
    } else {
      unversioned.push(route);
    }
  });
  app.addHook('onReady', async () => {
    // Read once every hook has run: SCIM marks its routes (directoryIntegration) in its own onRoute hook.
    const missing = unversioned.filter(
      (route) => !route.config?.directoryIntegration && app.hasRoute({ method: 'GET', url: route.url }),
    );
    if (missing.length > 0) {
      throw new Error(
        `conditional requests: ${missing.map((route) => `${[route.method].flat().join('/')} ${route.url}`).join(', ')} answer a GET but name no row whose version If-Match compares (config.rowVersion)`,
      );
    }
  });
});
