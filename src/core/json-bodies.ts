import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ProblemError } from './problems.ts';

type Done = (error: Error | null, body?: unknown) => void;
type StringParser = (request: FastifyRequest, body: string, done: Done) => void;

/**
 * JSON bodies, read by Fastify's own parser, where an empty body (or one of white space only) is no body.
 * SDKs and scripts send one header set on every call, `Content-Type: application/json` on a DELETE or a
 * bodiless POST among them: an operation that takes no body answers as if the header were absent, and one
 * that requires a body answers 400 "the body is missing" (see `isMissingBody`).
 */
export function emptyIsNoBody(app: FastifyInstance): StringParser {
  const parse = app.getDefaultJsonParser('error', 'error') as StringParser;
  return (request, body, done) =>
    body.trim() === ''
      ? done(null, undefined)
      : parse(request, body, (error, value) => {
          const infinite = error || !MAY_OVERFLOW.test(body) ? undefined : infinitePaths(value);
          if (infinite?.length) {
            const violations = infinite.map((path) => `${path}: a number past the range of a double (about 1.8e308)`);
            return done(new ProblemError(400, 'The body holds a number too large to be read.', { violations }));
          }
          done(error, value);
        });
}

/** What a number that parses as ±Infinity must hold: over 308 digits, or an exponent of three digits. */
const MAY_OVERFLOW = /\d{309}|[eE]\+?\d{3}/;

/**
 * Where `value` holds ±Infinity, as `body.a.0.b`: JSON writes numbers of any size (`1e999`), JSON.parse
 * makes those Infinity, every schema takes it as a number, and JSON.stringify writes it back as null.
 */
function infinitePaths(value: unknown): string[] {
  const found: string[] = [];
  const waiting: [unknown, string][] = [[value, 'body']];
  while (waiting.length > 0) {
    const [item, path] = waiting.pop()!;
    if (typeof item === 'number') {
      if (!Number.isFinite(item)) found.push(path);
    } else if (item !== null && typeof item === 'object') {
      for (const [key, child] of Object.entries(item)) waiting.push([child, `${path}.${key}`]);
    }
  }
  return found.sort();
}

/** Every JSON media type the server reads goes through `emptyIsNoBody`; an area adds its own JSON type with it too. */
export function acceptEmptyJsonBodies(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, emptyIsNoBody(app));
}

/** A body validation failed because no body came at all (none sent, or an empty one). */
export function isMissingBody(request: FastifyRequest, validationContext: string | undefined): boolean {
  return validationContext === 'body' && request.body === undefined;
}

export const MISSING_BODY_DETAIL = 'The body is missing: this operation takes a JSON body.';
