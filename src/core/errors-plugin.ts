import type { IncomingMessage } from 'node:http';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import FindMyWay from 'find-my-way';
import { isForeignKeyViolation, isTransientStoreFailure } from './db/database.ts';
import { isMissingBody, MISSING_BODY_DETAIL } from './json-bodies.ts';
import { PROBLEM_CONTENT_TYPE, ProblemError, problemBody, type ProblemOptions } from './problems.ts';
import { RESERVED_NAME_MESSAGE } from './reserved-names.ts';

interface ValidationIssue {
  instancePath: string;
  message?: string;
  keyword: string;
  params: Record<string, unknown>;
}

/**
 * "body.name: must NOT have fewer than 1 characters"; parameters are named bare, as the specification names them.
 * `names` maps a validated name back to the one to show (Fastify validates header names in lower case).
 */
export function violationsOf(
  context: string | undefined,
  issues: ValidationIssue[],
  names: Record<string, string> = {},
): string[] {
  return issues.map((issue) => {
    const segments = issue.instancePath
      .split('/')
      .filter(Boolean)
      .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let message = issue.message ?? 'is not valid';
    if (issue.keyword === 'required') {
      segments.push(String(issue.params.missingProperty));
      message = 'is required';
    } else if (issue.keyword === 'discriminator') {
      // A oneOf chosen by a property (streaming sources and targets by `type`): the property is what is wrong.
      segments.push(String(issue.params.tag));
      message = issue.params.error === 'tag' ? 'is required (a string)' : 'is not one of the types this field takes';
    } else if (issue.keyword === 'additionalProperties') {
      segments.push(String(issue.params.additionalProperty));
      message = 'is not allowed';
    } else if (issue.keyword === 'not') {
      // The only `not` the schemas use: NOT_RESERVED_OBJECT_NAME.
      message = RESERVED_NAME_MESSAGE;
    }
    if (segments.length > 0) segments[0] = names[segments[0]] ?? segments[0];
    const prefix = context === 'body' ? ['body'] : [];
    const field = [...prefix, ...segments].join('.') || context || 'request';
    return `${field}: ${message}`;
  });
}

/** Lower-case header name to its spelling in the route's schema: "versionname" to "versionName". */
function declaredHeaderNames(request: FastifyRequest): Record<string, string> {
  const properties =
    (request.routeOptions.schema?.headers as { properties?: Record<string, unknown> } | undefined)?.properties ?? {};
  return Object.fromEntries(Object.keys(properties).map((name) => [name.toLowerCase(), name]));
}

export function sendProblem(
  request: FastifyRequest,
  reply: FastifyReply,
  status: number,
  detail: string,
  options: ProblemOptions = {},
): FastifyReply {
  const typeBase = request.server.config.problemTypeBase;
  const instance = request.url.split('?')[0];
  if (options.headers) reply.headers(options.headers);
  return reply
    .code(status)
    .type(PROBLEM_CONTENT_TYPE)
    .send(problemBody(typeBase, status, detail, instance, options));
}

/** Renders every failure as problem+json: our own, the framework's, unknown routes, wrong methods and crashes. */
/** How much of a body refused as too large is still read, at most, before the answer. */
const DRAIN_MAX_BYTES = 64 * 1024 * 1024;
const DRAIN_MAX_MS = 10_000;

/**
 * Reads and drops what is left of a refused body, within bounds of bytes and time. Answering while the
 * client is still sending closes the connection under it, and most clients then report a broken pipe
 * instead of the answer; read to the end, they read the 413.
 */
function drainRefusedBody(raw: IncomingMessage, maxBytes: number, maxMs: number): Promise<void> {
  if (raw.complete || raw.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let seen = 0;
    const done = () => {
      clearTimeout(timer);
      raw.off('data', onData);
      raw.off('end', done);
      raw.off('close', done);
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > maxBytes) done();
    };
    const timer = setTimeout(done, maxMs);
    raw.on('data', onData);
    raw.once('end', done);
    raw.once('close', done);
    raw.resume();
  });
}

export const errorsPlugin = fp(async (app: FastifyInstance) => {
  // A router of our own, fed with every route, tells an unknown path (404) from a wrong method (405).
  const routes = FindMyWay();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (!routes.hasRoute(method as never, route.url)) routes.on(method as never, route.url, () => {});
    }
  });

  const answerNoRoute = (request: FastifyRequest, reply: FastifyReply, send: ErrorSender = sendProblem) => {
    const path = request.url.split('?')[0];
    const allowed = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'].filter((m) => routes.find(m as never, path));
    if (allowed.length > 0) {
      return send(request, reply, 405, `${request.method} is not supported on ${path}.`, {
        headers: { allow: allowed.join(', ') },
      });
    }
    return send(request, reply, 404, `No operation is found at ${request.method} ${path}.`);
  };
  app.decorate('answerNoRoute', answerNoRoute);
  app.setNotFoundHandler((request, reply) => answerNoRoute(request, reply));

  app.setErrorHandler((error: FastifyError | ProblemError, request, reply) => answerError(error, request, reply));
});

/** Renders an error (status, detail and options); SCIM operations render some in their own format. */
export type ErrorSender = typeof sendProblem;

/** Turns any failure, ours or the framework's, into a status and detail, and answers it with `send`. */
export async function answerError(
  error: FastifyError | ProblemError,
  request: FastifyRequest,
  reply: FastifyReply,
  send: ErrorSender = sendProblem,
): Promise<FastifyReply> {
  if ((error instanceof ProblemError ? error.status : error.statusCode) === 413) {
    await drainRefusedBody(request.raw, DRAIN_MAX_BYTES, DRAIN_MAX_MS);
  }
  if (error instanceof ProblemError) {
    return send(request, reply, error.status, error.message, error.options);
  }
  if (error.validation && isMissingBody(request, error.validationContext)) {
    return send(request, reply, 400, MISSING_BODY_DETAIL, { violations: ['body: is required'] });
  }
  if (error.validation) {
    return send(request, reply, 400, 'The request is not valid.', {
      violations: violationsOf(
        error.validationContext,
        error.validation as ValidationIssue[],
        error.validationContext === 'headers' ? declaredHeaderNames(request) : undefined,
      ),
    });
  }
  if (isForeignKeyViolation(error)) {
    // Checked at the start of the request, then deleted by a concurrent one before this write landed.
    return send(request, reply, 404, 'A resource this request refers to no longer exists.');
  }
  if (isTransientStoreFailure(error)) {
    request.log.warn({ err: error }, 'store busy');
    return send(request, reply, 503, 'The store is busy; nothing was written. Try again.', {
      headers: { 'retry-after': '1' },
    });
  }
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) return send(request, reply, status, error.message);
  request.log.error({ err: error }, 'unexpected failure');
  return send(request, reply, 500, `An unexpected error occurred. Quote request id ${request.id} when reporting it.`);
}
