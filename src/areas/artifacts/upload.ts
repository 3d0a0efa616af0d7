import { isUtf8 } from 'node:buffer';
import { mkdir, mkdtemp, open, readdir, rm, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance, FastifyRequest, FastifySchemaCompiler } from 'fastify';
import { Type, type Static } from 'typebox';
import { uploadPartsRead } from '../../core/idempotency.ts';
import { multipartParts, PartsDigest } from '../../core/multipart.ts';
import { badRequest, ProblemError } from '../../core/problems.ts';
import { validatorCompiler } from '../../core/validation.ts';

/**
 * The one reader of artifact uploads (project artifacts and shared pipeline artifacts): it reads a
 * multipart body part by part into a staging file, checking every part as it comes, so memory holds one
 * part (at most the part size limit) however large the upload. Nothing reaches the store until the
 * whole body has been read; the caller then commits the staged parts in one short transaction.
 */

export const IgnoredResource = Type.Object({ name: Type.String(), reason: Type.String() });
export type IgnoredResource = Static<typeof IgnoredResource>;

/** The answer to an upload: what was not taken and why, and the version created. */
export const UploadResult = Type.Object(
  { ignoredResources: Type.Array(IgnoredResource), versionName: Type.String() },
  {
    examples: [
      {
        ignoredResources: [{ name: 'images/logo.png', reason: 'not UTF-8 text' }],
        versionName: '2026.11.22-1',
      },
    ],
  },
);
export type UploadResult = Static<typeof UploadResult>;

/** How the OpenAPI document shows an upload body: one text part per asset, named by its path. */
export const UploadBody = Type.Object(
  {},
  {
    additionalProperties: Type.String({ format: 'binary' }),
    description:
      'multipart/form-data: one part per file, named by the file\'s relative path (e.g. "pipelines/load.orch.yaml"), content type text/plain.',
  },
);

/**
 * Validator compiler of an upload operation: its body is multipart, read and checked while it streams
 * in the handler, so the body schema only documents it. Everything else validates as anywhere.
 */
export const uploadValidatorCompiler: FastifySchemaCompiler<unknown> = (route) =>
  route.httpPart === 'body' ? () => true : validatorCompiler(route);

/**
 * Makes the routes registered in `scope` (and only there) take multipart bodies and nothing else:
 * a JSON or any other body answers 415. The body is left unread here: the handler streams it.
 */
export function acceptUploads(scope: FastifyInstance): void {
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser('multipart/form-data', (_request, _body, done) => done(null));
}

/** Value of a header the route's schema has validated; Fastify keeps header names in lower case. */
export function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name.toLowerCase()];
  return typeof value === 'string' ? value : undefined;
}

/**
 * Publishing tools URL-encode the `environmentName` header (form style: a space arrives as `+` or
 * `%20`); it is decoded in place before the route's schema checks it.
 */
export async function decodeEnvironmentNameHeader(request: FastifyRequest): Promise<void> {
  const raw = request.headers.environmentname;
  if (typeof raw !== 'string') return;
  try {
    request.headers.environmentname = decodeURIComponent(raw.replaceAll('+', ' '));
  } catch {
    throw badRequest('The request is not valid.', ['environmentName: not a valid URL encoding']);
  }
}

export interface StagedPart {
  path: string;
  contentType: string;
  offset: number;
  length: number;
}

/** The parts of an upload that passed every check, staged on disk until they are committed. */
export interface StagedUpload {
  parts: StagedPart[];
  ignored: IgnoredResource[];
  content(part: StagedPart): Promise<Buffer>;
  /**
   * The parts with their contents, a batch of at most `maxRows` parts and `maxBytes` bytes (or one larger
   * part) at a time. The contents are views of one buffer reused for every batch: use them before asking
   * for the next, so that a large upload does not leave a heap of buffers for the collector.
   */
  batches(maxRows: number, maxBytes: number): AsyncGenerator<{ part: StagedPart; content: Buffer }[]>;
}

/** Why a part of this path and content type is not taken (asked before its content is checked), or undefined to take it. */
export type PartRule = (path: string, contentType: string) => string | undefined;

/** Why `assetPath` must not be stored as a relative path, or undefined when it is safe. */
export function unsafePathReason(assetPath: string): string | undefined {
  if (assetPath === '') return 'unsafe path: empty';
  if (assetPath.length > 1024) return 'unsafe path: longer than 1024 characters';
  if (assetPath.includes('\\')) return 'unsafe path: contains a backslash';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(assetPath)) return 'unsafe path: contains a control character';
  if (assetPath.startsWith('/') || /^[A-Za-z]:/.test(assetPath)) return 'unsafe path: absolute';
  const segments = assetPath.split('/');
  if (segments.some((s) => s === '')) return 'unsafe path: empty segment';
  if (segments.some((s) => s === '.' || s === '..')) return 'unsafe path: "." or ".." segment';
  return undefined;
}

interface UploadLimits {
  uploadMaxParts: number;
  uploadMaxPartBytes: number;
  uploadMaxBytes: number;
  uploadConcurrency: number;
  uploadQueueTimeoutMs: number;
  stagingDir?: string;
  dataDir: string;
}

/**
 * Uploads in progress at once (0: no bound). Each holds up to a part and two buffers in memory, so
 * bounding how many run bounds the server's memory under a burst of uploads; the others wait their
 * turn with their bodies unread (the client is held back by TCP), and past the queue timeout answer 503.
 */
class UploadSlots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limits: UploadLimits) {
    this.free = limits.uploadConcurrency;
  }

  /** Waits for a slot; answers the function that gives it back. */
  async take(): Promise<() => void> {
    if (this.limits.uploadConcurrency === 0) return () => {};
    if (this.free > 0) this.free -= 1;
    else await this.queue();
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const next = this.waiting.shift();
      if (next) next();
      else this.free += 1;
    };
  }

  private queue(): Promise<void> {
    return new Promise((resolve, reject) => {
      const turn = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(turn), 1);
        reject(
          new ProblemError(503, `The server is reading ${this.limits.uploadConcurrency} other uploads; try again.`, {
            headers: { 'retry-after': '5', connection: 'close' },
          }),
        );
      }, this.limits.uploadQueueTimeoutMs);
      this.waiting.push(turn);
    });
  }
}

/** Staging folders are named `upload-<pid>-<random>`, so that a sweep can tell whose they are. */
const STAGING_PREFIX = 'upload-';

/** The folder uploads are staged in: the configured one, else `staging` in the data folder. */
export function stagingDirOf(config: Pick<UploadLimits, 'stagingDir' | 'dataDir'>): string {
  return config.stagingDir ?? path.join(config.dataDir, 'staging');
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Makes the staging folder and removes what uploads cut off by a crash left there: every staging folder
 * of a process that no longer runs (other server processes on this host may be staging beside us).
 * Answers how many were removed.
 */
export async function sweepStaging(stagingDir: string): Promise<number> {
  // Our own pid counts as alive: several servers in one process (tests) stage side by side.
  await mkdir(stagingDir, { recursive: true });
  let removed = 0;
  for (const name of await readdir(stagingDir)) {
    const pid = Number(/^upload-(\d+)-/.exec(name)?.[1]);
    if (pid && isAlive(pid)) continue;
    await rm(path.join(stagingDir, name), { recursive: true, force: true });
    removed += 1;
  }
  return removed;
}

/** One set of slots per server (its configuration), shared by every upload operation. */
const slotsOf = new WeakMap<UploadLimits, UploadSlots>();

/**
 * Reads the upload of `request` into a staging file, then runs `commit` on the staged parts; the staging
 * file is removed whatever happens. A part is kept when its path is safe and not a repeat, `rule` takes
 * it, and its content is UTF-8 text without NUL bytes; any other part is listed in `ignored` with the
 * reason. Limits answer 413; a body that is malformed or ends early fails before `commit` runs, so
 * nothing is stored. It first waits for one of the server's upload slots (503 past the queue timeout).
 */
export async function withStagedUpload<T>(
  request: FastifyRequest,
  limits: UploadLimits,
  rule: PartRule,
  commit: (upload: StagedUpload) => Promise<T>,
): Promise<T> {
  let slots = slotsOf.get(limits);
  if (!slots) slotsOf.set(limits, (slots = new UploadSlots(limits)));
  const giveBack = await slots.take();
  let dir: string | undefined;
  let file: FileHandle | undefined;
  try {
    dir = await mkdtemp(path.join(stagingDirOf(limits), `${STAGING_PREFIX}${process.pid}-`));
    file = await open(path.join(dir, 'parts'), 'w+');
    const digest = new PartsDigest();
    const staged = await stage(request, limits, rule, file, digest);
    // Before anything is written: an Idempotency-Key now covers the parts too.
    await uploadPartsRead(request, digest.hex());
    const staging = file;
    const read = async (part: StagedPart, into: Buffer) => {
      const { bytesRead } = await staging.read(into, 0, part.length, part.offset);
      if (bytesRead !== part.length) throw new Error(`staged part ${part.path} is short`);
      return into.subarray(0, part.length);
    };
    return await commit({
      ...staged,
      content: (part) => read(part, Buffer.allocUnsafe(part.length)),
      async *batches(maxRows, maxBytes) {
        const stagedBytes = staged.parts.reduce((sum, part) => sum + part.length, 0);
        const buffer = Buffer.allocUnsafe(Math.min(maxBytes, stagedBytes));
        let batch: { part: StagedPart; content: Buffer }[] = [];
        let used = 0;
        for (const part of staged.parts) {
          if (batch.length > 0 && (batch.length >= maxRows || used + part.length > buffer.length)) {
            yield batch;
            batch = [];
            used = 0;
          }
          // A part larger than the batch buffer comes in a batch of its own, in a buffer of its own.
          const into = part.length > buffer.length ? Buffer.allocUnsafe(part.length) : buffer.subarray(used);
          batch.push({ part, content: await read(part, into) });
          used += part.length;
        }
        if (batch.length > 0) yield batch;
      },
    });
  } finally {
    giveBack();
    await file?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

async function stage(
  request: FastifyRequest,
  limits: UploadLimits,
  rule: PartRule,
  file: FileHandle,
  digest: PartsDigest,
): Promise<Pick<StagedUpload, 'parts' | 'ignored'>> {
  const parts: StagedPart[] = [];
  const ignored: IgnoredResource[] = [];
  const seen = new Set<string>();
  const staging = new StagingWriter(file);
  const multipartLimits = {
    maxParts: limits.uploadMaxParts,
    maxPartBytes: limits.uploadMaxPartBytes,
    maxBytes: limits.uploadMaxBytes,
  };
  for await (const part of multipartParts(request.raw, multipartLimits)) {
    digest.add(part);
    const assetPath = part.name;
    const reason =
      unsafePathReason(assetPath) ??
      (seen.has(assetPath) ? 'duplicate path: the first part with this path is kept' : undefined) ??
      rule(assetPath, part.contentType) ??
      textProblem(part.content);
    seen.add(assetPath);
    if (reason) {
      ignored.push({ name: assetPath, reason });
      continue;
    }
    const start = staging.offset;
    for (const piece of part.content) await staging.write(piece);
    parts.push({ path: assetPath, contentType: part.contentType, offset: start, length: staging.offset - start });
  }
  await staging.flush();
  return { parts, ignored };
}

/** Why `pieces` (one content, in order) are not UTF-8 text without NUL bytes, or undefined when they are. */
function textProblem(pieces: Uint8Array[]): string | undefined {
  // A sequence split between two pieces is checked with the next one.
  let carry: Buffer = Buffer.alloc(0);
  for (const piece of pieces) {
    if (piece.includes(0)) return 'not text: contains a NUL byte';
    const text = carry.length > 0 ? Buffer.concat([carry, piece]) : Buffer.from(piece.buffer, piece.byteOffset, piece.length);
    const complete = text.length - unfinishedTail(text);
    if (!isUtf8(text.subarray(0, complete))) return 'not UTF-8 text';
    carry = text.subarray(complete);
  }
  return carry.length > 0 ? 'not UTF-8 text' : undefined;
}

/**
 * Appends to the staging file through a buffer of its own, written out when full: most parts are
 * smaller than a chunk of the body, and one file write each would keep every part's objects alive
 * across a round trip to the file system (past the young generation of the heap, to be collected late).
 */
class StagingWriter {
  private readonly buffer = Buffer.allocUnsafe(1024 * 1024);
  private buffered = 0;
  /** Where the buffer goes in the file. */
  private flushedTo = 0;

  constructor(private readonly file: FileHandle) {}

  /** The file's length once flushed, and where the next write goes. */
  get offset(): number {
    return this.flushedTo + this.buffered;
  }

  async write(bytes: Uint8Array): Promise<void> {
    const chunk = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
    let from = 0;
    while (from < chunk.length) {
      const copied = chunk.copy(this.buffer, this.buffered, from);
      this.buffered += copied;
      from += copied;
      if (this.buffered === this.buffer.length) await this.flush();
    }
  }

  async flush(): Promise<void> {
    let written = 0;
    while (written < this.buffered) {
      const { bytesWritten } = await this.file.write(this.buffer, written, this.buffered - written, this.flushedTo + written);
      written += bytesWritten;
    }
    this.flushedTo += this.buffered;
    this.buffered = 0;
  }
}

/** How many bytes at the end of `bytes` begin a UTF-8 sequence that `bytes` does not finish (0 to 3). */
function unfinishedTail(bytes: Buffer): number {
  for (let back = 1; back <= Math.min(3, bytes.length); back += 1) {
    const byte = bytes[bytes.length - back];
    if ((byte & 0xc0) === 0x80) continue; // a continuation byte: look further back for its lead
    const length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}
