import { createHash, type Hash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import {
  getMultipartBoundary,
  MaxFileSizeExceededError,
  MaxPartsExceededError,
  MaxTotalSizeExceededError,
  MultipartParseError,
  MultipartParser,
} from '@remix-run/multipart-parser/node';
import { badRequest, ProblemError } from './problems.ts';

/** The largest header block a part may have. */
const MAX_HEADER_BYTES = 16 * 1024;

/** One part of a multipart body, whole. */
export interface MultipartPart {
  /** The name in the part's content-disposition. */
  name: string;
  /** The filename in the part's content-disposition, if it names one. */
  filename: string | undefined;
  /** The part's media type; text/plain when it names none (RFC 7578). */
  contentType: string;
  /** The part's bytes as sent, in pieces. */
  content: Uint8Array[];
}

export interface MultipartLimits {
  maxParts: number;
  maxPartBytes: number;
  maxBytes: number;
}

/**
 * The parts of a multipart request body, one at a time and in order, each whole. The body is read only
 * as fast as the caller takes the parts: memory holds one part (at most `maxPartBytes`) and one chunk of
 * the body, however large the body. The parser makes no stream per part: with a stream per part (as
 * busboy does), V8 soon allocates those short-lived objects straight into the old generation, and a
 * body of many small parts then leaves tens of megabytes of garbage until a full collection.
 *
 * A malformed body, or one that is cut off or ends before its closing boundary, throws 400; more parts,
 * a larger part or more bytes than `limits` allow throws 413. Once the caller stops, the rest of the body
 * is left unread (and the answer should close the connection).
 */
export async function* multipartParts(raw: IncomingMessage, limits: MultipartLimits): AsyncGenerator<MultipartPart> {
  const boundary = getMultipartBoundary(raw.headers['content-type'] ?? '');
  if (!boundary) throw badRequest('The multipart body has no boundary.', ['content-type: has no boundary']);
  const parser = new MultipartParser(boundary, {
    maxParts: limits.maxParts,
    maxFileSize: limits.maxPartBytes,
    maxTotalSize: limits.maxBytes,
    maxHeaderSize: MAX_HEADER_BYTES,
  });
  const partNames = new PartNames(boundary);
  let taken = 0;
  let closed = false;
  try {
    for await (const chunk of bodyChunks(raw)) {
      if (closed) continue; // an epilogue after the closing boundary is ignored (RFC 2046)
      partNames.see(chunk);
      try {
        for (const part of parser.write(chunk)) {
          taken += 1;
          yield {
            name: formDataName(part.headers['content-disposition']),
            filename: part.filename,
            contentType: part.mediaType ?? 'text/plain',
            content: part.content,
          };
        }
      } catch (error) {
        // The parser refuses any byte after the closing boundary, even the CRLF that usually ends it.
        if (!(error instanceof MultipartParseError && /after end of stream/.test(error.message))) throw error;
        closed = true;
      }
    }
    parser.finish();
  } catch (error) {
    // The part a limit stopped at is the one after those taken.
    throw problemOf(error, limits, partNames.names[taken]);
  }
}

/**
 * A digest of a multipart body's parts as they are read: each part's name, filename, content type and
 * bytes, in order (not the boundary, which clients pick anew for every request). Two bodies with the same
 * parts have the same digest; it holds nothing of a part once that part is added.
 */
export class PartsDigest {
  private readonly hash: Hash = createHash('sha256');

  add(part: MultipartPart): void {
    const length = part.content.reduce((sum, piece) => sum + piece.length, 0);
    this.hash.update(`${JSON.stringify([part.name, part.filename ?? null, part.contentType, length])}\n`);
    for (const piece of part.content) this.hash.update(piece);
  }

  hex(): string {
    return this.hash.digest('hex');
  }
}

/**
 * The names of the parts, in order, read off the body's bytes as they pass to the parser (which keeps
 * the part it is filling to itself), so that a part too large for the limit can be named in the answer.
 * Holds at most one part's headers between chunks.
 */
class PartNames {
  readonly names: string[] = [];
  private readonly delimiter: Buffer;
  /** The bytes after the last whole part header: the start of a delimiter or header cut by a chunk's end. */
  private carry: Buffer = Buffer.from('\r\n'); // the first delimiter has no line break before it

  constructor(boundary: string) {
    this.delimiter = Buffer.from(`\r\n--${boundary}`);
  }

  see(chunk: Buffer): void {
    const bytes = Buffer.concat([this.carry, chunk]);
    let from = 0;
    for (;;) {
      const at = bytes.indexOf(this.delimiter, from);
      if (at === -1) {
        this.carry = bytes.subarray(Math.max(from, bytes.length - this.delimiter.length + 1));
        return;
      }
      const headersStart = at + this.delimiter.length;
      const headersEnd = bytes.indexOf('\r\n\r\n', headersStart);
      if (bytes.subarray(headersStart, headersStart + 2).toString() === '--') {
        from = headersStart; // the closing delimiter
      } else if (headersEnd === -1) {
        // The headers go on in the next chunk; a header block past the parser's limit fails there anyway.
        this.carry = Buffer.from(bytes.subarray(at, at + MAX_HEADER_BYTES));
        return;
      } else {
        const disposition = /^content-disposition:(.*)$/im.exec(bytes.toString('utf8', headersStart, headersEnd));
        this.names.push(formDataName(disposition?.[1]));
        from = headersEnd + 4;
      }
    }
  }
}

/**
 * The name in a form-data part's content-disposition, as browsers and HTTP clients send it: quoted,
 * with no backslash escapes (WHATWG's multipart/form-data encoding sends `"` as %22), so that a name
 * holding a backslash reaches the caller as it was sent.
 */
function formDataName(disposition = ''): string {
  const parameter = /;\s*([^\s=;]+)\s*=\s*(?:"([^"]*)"|([^;]*))/g;
  for (let match; (match = parameter.exec(disposition));) {
    if (match[1].toLowerCase() === 'name') return match[2] ?? match[3].trim();
  }
  return '';
}

function problemOf(error: unknown, limits: MultipartLimits, partName: string | undefined): unknown {
  const tooLarge = (detail: string) => new ProblemError(413, detail, { headers: { connection: 'close' } });
  if (error instanceof MaxPartsExceededError) return tooLarge(`An upload has at most ${limits.maxParts} parts.`);
  if (error instanceof MaxFileSizeExceededError) {
    const part = partName === undefined ? 'A part' : `The part ${JSON.stringify(partName)}`;
    return tooLarge(`${part} is larger than ${limits.maxPartBytes} bytes.`);
  }
  if (error instanceof MaxTotalSizeExceededError) return tooLarge(`The upload is larger than ${limits.maxBytes} bytes.`);
  if (error instanceof MultipartParseError && /not finished/.test(error.message))
    return badRequest('The multipart body ended before its closing boundary. Nothing was stored.');
  if (error instanceof MultipartParseError)
    return badRequest(`The multipart body is not valid: ${error.message}. Nothing was stored.`);
  if ((error as { code?: string }).code === 'ERR_ENCODING_INVALID_ENCODED_DATA')
    return badRequest('The multipart body is not valid: a part header is not UTF-8. Nothing was stored.');
  return error;
}

/**
 * The chunks of a request body as they arrive, read only when asked for. Unlike the stream's own
 * iterator, stopping early leaves the connection open, so that an error can still be answered.
 */
async function* bodyChunks(raw: IncomingMessage): AsyncGenerator<Buffer> {
  for (;;) {
    const chunk = raw.read() as Buffer | null;
    if (chunk !== null) yield chunk;
    else if (raw.readableEnded) return;
    else if (raw.destroyed) throw badRequest('The request body was cut off. Nothing was stored.');
    else await nextEvent(raw);
  }
}

/** Waits until `raw` has more to read, has ended, or has been cut off. */
function nextEvent(raw: IncomingMessage): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      raw.off('readable', done).off('end', done).off('close', done).off('error', done);
      resolve();
    };
    raw.on('readable', done).on('end', done).on('close', done).on('error', done);
  });
}
