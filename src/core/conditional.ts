import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import fp from 'fastify-plugin';
import { sql } from 'kysely';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isUniqueViolation, type Db } from './db/database.ts';
import { badRequest, ProblemError } from './problems.ts';

/** How long a conditional write holds its resource at most (a process that died holding it lets go then). */
const LOCK_MS = 30_000;
/** How long a conditional write waits for another one's hold on the same resource before it answers 409. */
const WAIT_MS = 10_000;

/**
 * Holds `key` in the store for `holder` (every server process sees it), waiting while another holds it;
 * answers whether it was taken within WAIT_MS. A hold older than LOCK_MS is taken over.
 */
async function holdAcrossProcesses(db: Db, key: string, holder: string): Promise<boolean> {
  const deadline = Date.now() + WAIT_MS;
  for (let pause = 2; ; pause = Math.min(pause * 2, 50)) {
    const at = new Date();
    try {
      await db
        .insertInto('conditionalWriteLocks')
        .values({ key, holder, lockedUntil: new Date(at.getTime() + LOCK_MS).toISOString() })
        .execute();
      return true;
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
    }
    // Held: taken over if its holder's time is up, else waited for.
    await db.deleteFrom('conditionalWriteLocks').where('key', '=', key).where('lockedUntil', '<', at.toISOString()).execute();
    if (Date.now() + pause > deadline) return false;
    await sleep(pause);
  }
}

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

declare module 'fastify' {
  interface FastifyRequest {
    /** Released when the answer is sent: conditional writes to one URL run one at a time in this process. */
    conditionalRelease: (() => void) | null;
    /** The row version the request's If-Match check saw, on a route whose write compares it (config.rowVersion). */
    expectedVersion: VersionExpectation | null;
  }
}

/** The version of one row that a write with If-Match may change, as its check saw it. */
interface VersionExpectation {
  table: string;
  id: string;
  version: number;
  /** The write compared it once: later statements of the request change the row it changed. */
  used: boolean;
}

/** The handler of a write with If-Match on a versioned route runs with its expectation. */
const expectations = new AsyncLocalStorage<VersionExpectation>();

/**
 * The version of row `id` of `table` that the write running now must find, or undefined (no If-Match, or the
 * request already changed that row). The repository adds it to its UPDATE's or DELETE's WHERE, then tells
 * heldExpectedVersion whether a row matched.
 */
export function expectedRowVersion(table: string, id: string): number | undefined {
  const expected = expectations.getStore();
  return expected && !expected.used && expected.table === table && expected.id === id ? expected.version : undefined;
}

/**
 * After a write that compared expectedRowVersion: when no row had that version, another write came between the
 * request's check and its write (or the row is gone), and this is a 412 (thrown in the write's transaction,
 * which rolls back: nothing is done).
 */
export function heldExpectedVersion(table: string, id: string, held: boolean): void {
  const expected = expectations.getStore();
  if (!expected || expected.used || expected.table !== table || expected.id !== id) return;
  if (!held) {
    throw new ProblemError(412, 'The resource changed since the version If-Match names: read it again, then send the change.', {
      violations: ['If-Match: does not name the current version'],
    });
  }
  expected.used = true;
}

/** The row's version now, or undefined when there is no such row. */
async function rowVersionOf(db: Db, table: string, id: string): Promise<number | undefined> {
  const { rows } = await sql<{
    version: number;
  }>`select row_version as version from ${sql.table(table)} where id = ${id}`.execute(db);
  return rows[0] === undefined ? undefined : Number(rows[0].version);
}

/**
 * Conditional requests for every area of the scope it is registered in (SCIM, which has its own, excepted):
 *
 * - Every answer with a body carries a strong `ETag` of it; resources and list pages alike.
 * - A GET or HEAD with `If-None-Match` naming it (or `*`; weak comparison, as RFC 9110 says) answers 304 with
 *   no body: a poller pays a round trip, not the answer.
 * - A PUT, PATCH or DELETE with `If-Match` is done only if the tag names the resource as a GET of the same
 *   URL answers it now (strong comparison; `*`: it exists), else 412 and nothing is done. The check reads
 *   the resource through the server itself (the same authorization), so one rule covers every area. From its
 *   check to its answer a conditional write holds its URL, in this process (a queue) and in the store (a row
 *   of `conditional_write_locks`, seen by every process): conditional writes to one resource run one at a
 *   time across instances, each checking what the previous left. (A write without If-Match takes no hold: it
 *   asked for no check.) Where no GET answers the URL, If-Match is refused (400): there is no tag to name.
 */
export const conditionalRequestsPlugin = fp(async (app: FastifyInstance) => {
  app.decorateRequest('conditionalRelease', null);
  app.decorateRequest('expectedVersion', null);
  const queues = new Map<string, Promise<void>>();
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
    for (const name of ['authorization', 'account-id']) {
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
    // Where no GET answers the URL there is no ETag to name: refused, rather than a 412 no retry could pass.
    if (!app.hasRoute({ method: 'GET', url: request.routeOptions.url ?? request.url })) {
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

    // A versioned row: the check finds the version the tag is of, and the write changes the row only at that
    // version (expectedRowVersion), so any write that comes between, with If-Match or without, makes it a 412.
    const versioned = request.routeOptions.config.rowVersion;
    if (versioned) {
      const id = String((request.params as Record<string, unknown>)[versioned.idParam]);
      // The version on each side of the GET: the same, and the GET answered that version.
      for (let attempt = 0; attempt < 5; attempt += 1) {
        const before = await rowVersionOf(db, versioned.table, id);
        const current = await currentTag(request);
        const after = await rowVersionOf(db, versioned.table, id);
        if (before !== after) continue;
        if (!matches(current) || after === undefined) throw stale(current);
        request.expectedVersion = { table: versioned.table, id, version: after, used: false };
        return;
      }
      throw stale(undefined);
    }

    // Elsewhere, one conditional write to a URL at a time here: the next checks what the previous left.
    const url = `${request.principal.accountId} ${request.url}`;
    const previous = queues.get(url) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const chained = previous.then(() => mine);
    queues.set(url, chained);
    const holder = randomUUID();
    let held = false;
    request.conditionalRelease = () => {
      const letGo = held
        ? db.deleteFrom('conditionalWriteLocks').where('key', '=', url).where('holder', '=', holder).execute()
        : Promise.resolve();
      void letGo
        .catch((error: unknown) => request.log.warn({ err: error }, 'could not release a conditional write hold'))
        .finally(() => {
          release();
          if (queues.get(url) === chained) queues.delete(url);
        });
    };
    await previous;
    // Across processes: the store's row for the URL, held until the answer.
    held = await holdAcrossProcesses(db, url, holder);
    if (!held) {
      throw new ProblemError(409, 'Another conditional write to this resource is in progress: try again.', {
        violations: ['If-Match: another write with If-Match holds this resource'],
        headers: { 'retry-after': '1' },
      });
    }
    const current = await currentTag(request);
    if (!matches(current)) throw stale(current);
  };
  const releaseAfter = async (request: FastifyRequest) => {
    request.conditionalRelease?.();
    request.conditionalRelease = null;
  };

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
    }
    route.onResponse = [releaseAfter, ...[route.onResponse ?? []].flat()];
    route.onRequestAbort = [releaseAfter, ...[route.onRequestAbort ?? []].flat()];
  });
});
