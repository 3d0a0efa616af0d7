import type { FastifyInstance, FastifyRequest } from 'fastify';

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
  return (request, body, done) => (body.trim() === '' ? done(null, undefined) : parse(request, body, done));
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
