import { isUtf8 } from 'node:buffer';
import { mkdtemp, open, rm, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyRequest, FastifySchemaCompiler } from 'fastify';
import multipart from '@fastify/multipart';
import { Type, type Static } from 'typebox';
import type { Config } from '../../core/config.ts';
import { badRequest, ProblemError } from '../../core/problems.ts';
import { validatorCompiler } from '../../core/validation.ts';

/**
 * The one reader of artifact uploads (project artifacts and shared pipeline artifacts): it streams a
 * multipart body part by part into a staging file, checking every part as it goes, so memory stays
 * bounded by one chunk however large the upload. Nothing reaches the store until the whole body has
 * been read; the caller then commits the staged parts in one short transaction.
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
 * a JSON or any other body answers 415.
 */
export async function acceptUploads(scope: FastifyInstance, config: Config): Promise<void> {
  scope.removeAllContentTypeParsers();
  await scope.register(multipart, {
    limits: {
      parts: config.uploadMaxParts,
      files: config.uploadMaxParts,
      fields: config.uploadMaxParts,
      fileSize: config.uploadMaxPartBytes,
      fieldSize: config.uploadMaxPartBytes,
    },
  });
}

/** Value of a header the route's schema has validated; Fastify keeps header names in lower case. */
export function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name.toLowerCase()];
  return typeof value === 'string' ? value : undefined;
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

/** Why a part of this path and content type is not taken before its content is read, or undefined to take it. */
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
}

const LIMIT_ERRORS = new Set(['FST_PARTS_LIMIT', 'FST_FILES_LIMIT', 'FST_FIELDS_LIMIT']);
/** What the multipart parser says of a body that breaks off inside a part (besides a premature close) or is otherwise malformed. */
const MALFORMED_BODY = /terminated early|unexpected end|malformed/i;

/**
 * Watches the raw body for the multipart closing delimiter. The multipart reader ends quietly on a
 * body cut off between two parts, so this is how a truncated upload is told from a complete one.
 */
function watchClosingDelimiter(request: FastifyRequest): () => boolean {
  const boundary = /boundary="?([^";]+)"?/i.exec(request.headers['content-type'] ?? '')?.[1];
  if (!boundary) throw badRequest('The multipart body has no boundary.', ['content-type: has no boundary']);
  const delimiter = Buffer.from(`--${boundary}--`);
  let tail = Buffer.alloc(0);
  let seen = false;
  const raw = request.raw;
  // Paused first so that listening does not start the flow before the multipart reader is piped.
  raw.pause();
  raw.on('data', (chunk: Buffer) => {
    if (seen) return;
    const window = tail.length > 0 ? Buffer.concat([tail, chunk]) : chunk;
    if (window.includes(delimiter)) seen = true;
    else tail = Buffer.from(window.subarray(Math.max(0, window.length - delimiter.length + 1)));
  });
  return () => seen && raw.complete;
}

/**
 * Reads the upload of `request` into a staging file, then runs `commit` on the staged parts; the staging
 * file is removed whatever happens. A part is kept when its path is safe and not a repeat, `rule` takes
 * it, and its content is UTF-8 text without NUL bytes; any other part is listed in `ignored` with the
 * reason. Limits answer 413; a body that ends early fails before `commit` runs, so nothing is stored.
 */
export async function withStagedUpload<T>(
  request: FastifyRequest,
  limits: UploadLimits,
  rule: PartRule,
  commit: (upload: StagedUpload) => Promise<T>,
): Promise<T> {
  const dir = await mkdtemp(path.join(tmpdir(), 'dpc-upload-'));
  let file: FileHandle | undefined;
  try {
    file = await open(path.join(dir, 'parts'), 'w+');
    const staged = await stage(request, limits, rule, file);
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
    await file?.close();
    await rm(dir, { recursive: true, force: true });
  }
}

async function stage(
  request: FastifyRequest,
  limits: UploadLimits,
  rule: PartRule,
  file: FileHandle,
): Promise<Pick<StagedUpload, 'parts' | 'ignored'>> {
  const complete = watchClosingDelimiter(request);
  const parts: StagedPart[] = [];
  const ignored: IgnoredResource[] = [];
  const seen = new Set<string>();
  let offset = 0;
  let total = 0;
  try {
    for await (const part of request.parts()) {
      const assetPath = part.fieldname ?? '';
      const source: Iterable<Buffer> | Readable =
        part.type === 'file' ? part.file : [Buffer.from(String(part.value ?? ''), 'utf8')];
      if (part.type === 'field' && part.valueTruncated)
        throw tooLarge(`A part is larger than ${limits.uploadMaxPartBytes} bytes.`);
      const refusal =
        unsafePathReason(assetPath) ??
        (seen.has(assetPath) ? 'duplicate path: the first part with this path is kept' : rule(assetPath, part.mimetype));
      seen.add(assetPath);
      // Text check as the bytes stream through; a sequence split between chunks is checked with the next one.
      let carry = Buffer.alloc(0);
      let contentProblem: string | undefined;
      const start = offset;
      for await (const chunk of source as AsyncIterable<Buffer>) {
        total += chunk.length;
        if (total > limits.uploadMaxBytes) throw tooLarge(`The upload is larger than ${limits.uploadMaxBytes} bytes.`);
        if (refusal || contentProblem) continue; // drained, not stored
        if (chunk.includes(0)) contentProblem = 'not text: contains a NUL byte';
        else {
          const text = carry.length > 0 ? Buffer.concat([carry, chunk]) : chunk;
          const complete = text.length - unfinishedTail(text);
          if (!isUtf8(text.subarray(0, complete))) contentProblem = 'not UTF-8 text';
          carry = Buffer.from(text.subarray(complete));
        }
        if (!contentProblem) {
          await file.write(chunk, 0, chunk.length, offset);
          offset += chunk.length;
        }
      }
      if (part.type === 'file' && part.file.truncated)
        throw tooLarge(`A part is larger than ${limits.uploadMaxPartBytes} bytes.`);
      if (!refusal && !contentProblem && carry.length > 0) contentProblem = 'not UTF-8 text';
      const reason = refusal ?? contentProblem;
      if (reason) {
        ignored.push({ name: assetPath, reason });
        offset = start; // the next part overwrites what was written of this one
      } else {
        parts.push({ path: assetPath, contentType: part.mimetype, offset: start, length: offset - start });
      }
    }
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code && LIMIT_ERRORS.has(code)) throw tooLarge(`An upload has at most ${limits.uploadMaxParts} parts.`);
    if (code === 'ERR_STREAM_PREMATURE_CLOSE' || MALFORMED_BODY.test((error as Error).message))
      throw badRequest(`The multipart body is not valid: ${(error as Error).message}. Nothing was stored.`);
    throw error;
  }
  if (!complete()) throw badRequest('The multipart body ended before its closing boundary; nothing was stored.');
  return { parts, ignored };
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

function tooLarge(detail: string): ProblemError {
  // The rest of the body is not read: the connection closes after the answer.
  return new ProblemError(413, detail, { headers: { connection: 'close' } });
}
