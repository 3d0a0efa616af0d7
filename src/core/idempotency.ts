import { createHmac } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isUniqueViolation, now } from './db/database.ts';
import { multipartParts, PartsDigest } from './multipart.ts';
import { ProblemError, badRequest } from './problems.ts';
import { runPeriodically } from './ticker.ts';

const KEYED_METHODS = new Set(['POST', 'PATCH']);
/** What a key may be: printable ASCII, as the IETF draft and every client library send (UUIDs, most often). */
const KEY = /^[\x21-\x7e]{1,255}$/;
/** How long an answer is kept for retries. */
const KEPT_MS = 24 * 3_600_000;
/** How long a request in progress holds its key; a retry after that takes it over (the process answering died). */
const CLAIM_MS = 120_000;
/** How long a retry waits for the same key's request in progress to be answered, before 409. */
const WAIT_MS = 10_000;
const WAIT_STEP_MS = 50;
/** Answer headers replayed with the stored body. */
const REPLAYED_HEADERS = ['content-type', 'location', 'cache-control'];
/** Headers that are part of a multipart upload's request (its parts are not read before the handler). */
const UPLOAD_HEADERS = ['versionname', 'environmentname', 'commithash', 'branch', 'sharedpipelineidprefix'];

interface Claim {
  clientId: string;
  key: string;
  /**
   * Of a multipart upload: the fingerprint of its method, URL and headers. Its parts are read by its
   * handler, which adds their digest to the stored fingerprint (`uploadPartsRead`) before it writes anything.
   */
  upload?: { fingerprint: string; partsRead: boolean };
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The Idempotency-Key this request holds while it runs. */
    idempotencyClaim: Claim | null;
    /** Answered from a stored answer: nothing was done (the audit trail records nothing either). */
    idempotentReplay: boolean;
  }
}

const isMultipart = (request: FastifyRequest) => String(request.headers['content-type'] ?? '').startsWith('multipart/');

/**
 * What makes two requests the same: method, URL (query included) and body, as an HMAC-SHA256 keyed with a
 * key derived from the server's encryption key (never a plain hash: a body may hold a secret value, and a
 * plain hash of an otherwise known body gives a guessable secret away to whoever reads the store). A JSON body counts as parsed
 * and validated, so formatting differences and the order of an object's members do not matter. A multipart
 * upload (read by its handler) counts here by its content type without the boundary and the headers that
 * describe it; its parts (names, filenames, content types and bytes: `PartsDigest`) are added once read,
 * as `<this>:<digest of the parts>`.
 */
function fingerprintOf(request: FastifyRequest, key: Buffer): string {
  const hash = createHmac('sha256', key).update(`${request.method} ${request.url}\n`);
  const type = String(request.headers['content-type'] ?? '');
  if (isMultipart(request)) {
    hash.update(type.split(';')[0]);
    for (const name of UPLOAD_HEADERS) hash.update(`\n${name}:${String(request.headers[name] ?? '')}`);
  } else {
    hash.update(canonicalJson(request.body ?? null));
  }
  return hash.digest('hex');
}

/**
 * Called by an upload's handler once it has read every part, before it writes anything: the key's
 * fingerprint then covers the parts, so that a retry with other parts is 422 and one with the same parts
 * is answered the same. Does nothing for a request without an Idempotency-Key.
 */
export async function uploadPartsRead(request: FastifyRequest, partsDigest: string): Promise<void> {
  const held = request.idempotencyClaim;
  if (!held?.upload || held.upload.partsRead) return;
  await request.server.store.db
    .updateTable('idempotencyKeys')
    .set({ fingerprint: `${held.upload.fingerprint}:${partsDigest}` })
    .where('clientId', '=', held.clientId)
    .where('key', '=', held.key)
    .where('state', '=', 'running')
    .where('fingerprint', '=', held.upload.fingerprint)
    .execute();
  held.upload.partsRead = true;
}

/** JSON with every object's members in the order of their names: the same fields sent in another order are the same body. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const members = Object.entries(value as Record<string, unknown>)
      .filter(([, member]) => member !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${members.map(([name, member]) => `${JSON.stringify(name)}:${canonicalJson(member)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

const inProgress = () =>
  new ProblemError(409, 'A request with this Idempotency-Key is still in progress; retry it once that one is answered.', {
    name: 'idempotency-key-in-use',
    headers: { 'retry-after': '1' },
  });

/**
 * `Idempotency-Key` on every POST and PATCH of the scope it is registered in. The first request with a
 * key (per API client) claims it and runs; its answer (status, body, Content-Type and Location) is kept 24
 * hours, and a retry with the same key and the same request is answered the same without running again
 * (`Idempotent-Replayed: true`). The same key with another request is 422. A retry while the first still
 * runs waits up to 10 s for its answer, then answers 409 (Retry-After). An answer of 5xx or 429 is not
 * kept: the key is released, so a retry runs the request again. See docs/idempotency.md.
 */
export const idempotencyPlugin = fp(async (app: FastifyInstance) => {
  app.decorateRequest('idempotencyClaim', null);
  app.decorateRequest('idempotentReplay', false);
  const db = app.store.db;
  const box = app.secretBox;
  const fingerprintKey = box.derive('idempotency-key fingerprints');
  /** What a stored answer is bound to: its key row (a sealed body copied to another row does not open there). */
  const sealContext = (clientId: string, key: string) => `idempotency_keys:${clientId}:${key}:body`;

  runPeriodically(app, 'idempotency key expiry', 3_600_000, () =>
    db.deleteFrom('idempotencyKeys').where('expiresAt', '<', now()).execute(),
  );

  const replay = (
    reply: FastifyReply,
    row: { clientId: string; key: string; status: number | null; headers: string | null; body: string | null },
  ) => {
    reply.request.idempotentReplay = true;
    const headers = JSON.parse(row.headers ?? '{}') as Record<string, string>;
    // Stored sealed (it may show a secret once: a signing secret, a client secret).
    const body = row.body === null ? null : box.open(row.body, sealContext(row.clientId, row.key));
    reply.code(row.status ?? 200).headers({ ...headers, 'idempotent-replayed': 'true' });
    return reply.send(body === null ? undefined : Buffer.from(body, 'utf8'));
  };

  const claim = async (request: FastifyRequest, reply: FastifyReply) => {
    const key = request.headers['idempotency-key'];
    if (key === undefined || !request.principal) return;
    if (typeof key !== 'string' || !KEY.test(key)) {
      throw badRequest('The Idempotency-Key header must be 1 to 255 printable ASCII characters.', [
        'Idempotency-Key: must be 1 to 255 printable ASCII characters',
      ]);
    }
    const { accountId, clientId } = request.principal;
    const fingerprint = fingerprintOf(request, fingerprintKey);
    const upload = isMultipart(request);
    const claimed = () => {
      request.idempotencyClaim = { clientId, key, ...(upload ? { upload: { fingerprint, partsRead: false } } : {}) };
    };
    /** This upload's parts digest, read off its body (only to compare it with a stored one: the body is then spent). */
    let partsDigest: string | undefined;
    const partsDigestOfBody = async () => {
      if (partsDigest === undefined) {
        const digest = new PartsDigest();
        const { uploadMaxParts, uploadMaxPartBytes, uploadMaxBytes } = app.config;
        const limits = { maxParts: uploadMaxParts, maxPartBytes: uploadMaxPartBytes, maxBytes: uploadMaxBytes };
        for await (const part of multipartParts(request.raw, limits)) digest.add(part);
        partsDigest = digest.hex();
      }
      return partsDigest;
    };
    const reused = () =>
      new ProblemError(422, 'This Idempotency-Key was used with another request (method, URL or body): use a new key.', {
        name: 'idempotency-key-reused',
        violations: ['Idempotency-Key: was sent with another request'],
      });
    const waitUntil = Date.now() + WAIT_MS;
    for (;;) {
      const at = new Date();
      // This upload's body is spent once read to compare: it can no longer run, but a retry can.
      const spent = () => partsDigest !== undefined;
      if (!spent()) {
        try {
          await db
            .insertInto('idempotencyKeys')
            .values({
              clientId,
              key,
              accountId,
              fingerprint,
              state: 'running',
              status: null,
              headers: null,
              body: null,
              lockedUntil: new Date(at.getTime() + CLAIM_MS).toISOString(),
              createdAt: at.toISOString(),
              expiresAt: new Date(at.getTime() + KEPT_MS).toISOString(),
            })
            .execute();
          claimed();
          return;
        } catch (error) {
          if (!isUniqueViolation(error)) throw error;
        }
      }
      const row = await db
        .selectFrom('idempotencyKeys')
        .selectAll()
        .where('clientId', '=', clientId)
        .where('key', '=', key)
        .executeTakeFirst();
      if (!row) {
        if (spent()) throw inProgress();
        continue; // released or expired meanwhile: claim it
      }
      if (row.expiresAt < at.toISOString()) {
        await db
          .deleteFrom('idempotencyKeys')
          .where('clientId', '=', clientId)
          .where('key', '=', key)
          .where('expiresAt', '=', row.expiresAt)
          .execute();
        continue;
      }
      // An upload's stored fingerprint is `<method, URL, headers>:<parts>` once its parts were read.
      const [storedRequest, storedParts] = row.fingerprint.split(':');
      if (storedRequest !== fingerprint) throw reused();
      const abandoned = row.state === 'running' && row.lockedUntil !== null && row.lockedUntil < at.toISOString();
      if (abandoned && !spent()) {
        // The request holding it was never answered (its process died): this one takes it over.
        const taken = await db
          .updateTable('idempotencyKeys')
          .set({ lockedUntil: new Date(at.getTime() + CLAIM_MS).toISOString(), fingerprint })
          .where('clientId', '=', clientId)
          .where('key', '=', key)
          .where('state', '=', 'running')
          .where('lockedUntil', '=', row.lockedUntil)
          .executeTakeFirst();
        if (taken.numUpdatedRows > 0n) {
          claimed();
          return;
        }
        continue;
      }
      // A retry of an upload is the same request only with the same parts: read them (once) to compare.
      if (upload && storedParts !== undefined && (await partsDigestOfBody()) !== storedParts) throw reused();
      if (row.state === 'done') return replay(reply, row);
      if (abandoned || Date.now() >= waitUntil) throw inProgress();
      await sleep(WAIT_STEP_MS);
    }
  };

  const keep = async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const held = request.idempotencyClaim;
    if (!held || request.idempotentReplay) return payload;
    request.idempotencyClaim = null;
    const partsUnread = held.upload !== undefined && !held.upload.partsRead;
    const where = db.updateTable('idempotencyKeys').where('clientId', '=', held.clientId).where('key', '=', held.key);
    const status = reply.statusCode;
    const body =
      typeof payload === 'string'
        ? payload
        : Buffer.isBuffer(payload)
          ? payload.toString('utf8')
          : payload == null
            ? null
            : undefined;
    try {
      if (status >= 500 || status === 429 || body === undefined || partsUnread) {
        // Not an answer to give again (or one that cannot be kept, a stream; or an upload's answer given
        // before its parts were read, which the key's fingerprint cannot tell apart): a retry runs the request.
        await db.deleteFrom('idempotencyKeys').where('clientId', '=', held.clientId).where('key', '=', held.key).execute();
        return payload;
      }
      const headers = Object.fromEntries(
        REPLAYED_HEADERS.flatMap((name) => {
          const value = reply.getHeader(name);
          return value === undefined ? [] : [[name, String(value)]];
        }),
      );
      const sealed = body === null ? null : box.seal(body, sealContext(held.clientId, held.key));
      await where.set({ state: 'done', status, headers: JSON.stringify(headers), body: sealed, lockedUntil: null }).execute();
    } catch (error) {
      request.log.error({ err: error }, 'could not keep the answer of an idempotent request');
    }
    return payload;
  };

  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (!methods.some((method) => KEYED_METHODS.has(method)) || route.config?.readOnly || route.config?.directoryIntegration)
      return;
    route.preHandler = [claim, ...[route.preHandler ?? []].flat()];
    route.onSend = [keep, ...[route.onSend ?? []].flat()];
  });
});
