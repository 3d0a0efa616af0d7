import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyRequest } from 'fastify';
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
  }
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
    // One conditional write to a URL at a time here: the next checks what the previous left.
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
    const tags = tagsOf(ifMatch);
    const current = await currentTag(request);
    const matched =
      current !== undefined &&
      (tags.includes('*') || tags.some((candidate) => !candidate.startsWith('W/') && candidate === current));
    if (!matched) {
      throw new ProblemError(
        412,
        current === undefined
          ? 'If-Match names a version of a resource that a GET of this URL does not answer (it does not exist).'
          : 'The resource changed since the version If-Match names: read it again, then send the change.',
        { violations: ['If-Match: does not name the current version'], headers: current ? { etag: current } : {} },
      );
    }
  };
  const releaseAfter = async (request: FastifyRequest) => {
    request.conditionalRelease?.();
    request.conditionalRelease = null;
  };

  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (!methods.some((method) => GUARDED_METHODS.has(method)) || route.config?.directoryIntegration) return;
    route.preHandler = [guard, ...[route.preHandler ?? []].flat()];
    route.onResponse = [releaseAfter, ...[route.onResponse ?? []].flat()];
    route.onRequestAbort = [releaseAfter, ...[route.onRequestAbort ?? []].flat()];
  });
});
