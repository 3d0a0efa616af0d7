import type { FastifyInstance, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { PROBLEM_CONTENT_TYPE, ProblemDetail, STATUS_TITLES } from './problems.ts';

/** Problems any /dpc/v1 operation may answer; routes declare the rest (409, 422, ...) themselves. */
const COMMON_PROBLEMS = [400, 401, 403, 404, 429, 500];
const BODY_PROBLEMS = [413, 415];

export function problemResponse(status: number) {
  return {
    description: STATUS_TITLES[status],
    content: { [PROBLEM_CONTENT_TYPE]: { schema: { $ref: 'ProblemDetail#' } } },
  };
}

/** Problem responses for the given statuses, to spread into a route's `response` schema. */
export function problems(...statuses: number[]) {
  return Object.fromEntries(statuses.map((status) => [status, problemResponse(status)]));
}

/** The 204 answer of a delete, to spread into a route's `response` schema. */
export function noContent(description: string) {
  return { 204: { type: 'null', description } };
}

function addCommonProblems(route: RouteOptions): void {
  if (!route.url.startsWith('/dpc/v1') || route.schema?.hide) return;
  const schema = (route.schema ??= {});
  const response = (schema.response ??= {}) as Record<string, unknown>;
  const statuses = schema.body || route.method === 'POST' ? [...COMMON_PROBLEMS, ...BODY_PROBLEMS] : COMMON_PROBLEMS;
  for (const status of statuses) response[status] ??= problemResponse(status);
  (schema as { security?: unknown }).security ??= [{ bearerAuth: [] }];
}

interface OpenApiOperation {
  operationId?: string;
  security?: unknown[];
  parameters?: { in: string; required?: boolean; schema?: { default?: unknown } }[];
}
type OpenApiDocument = { paths?: Record<string, Record<string, OpenApiOperation>> } & Record<string, unknown>;

const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];

/** A stable operation id from the method and the path: GET /dpc/v1/projects/{projectId}/variables is getProjectsByProjectIdVariables. */
function operationIdOf(method: string, path: string): string {
  const words = path
    .replace(/^\/dpc\/v1\//, '/')
    .split('/')
    .filter(Boolean)
    .map((segment) => {
      const parameter = /^\{(.+)\}$/.exec(segment);
      const word = (parameter ? `by-${parameter[1]}` : segment).replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string = '') =>
        c.toUpperCase(),
      );
      return word.charAt(0).toUpperCase() + word.slice(1);
    });
  return method + words.join('');
}

/**
 * What the route schemas cannot say alone: a query parameter with a default is optional (the schema's
 * `required` lists it because the validator fills it in), every operation has a stable operationId, and
 * operations outside /dpc/v1 (the token endpoint, the JWKS, health) say explicitly that they need no token.
 */
function settleOperations(document: OpenApiDocument): OpenApiDocument {
  for (const [path, item] of Object.entries(document.paths ?? {})) {
    for (const method of HTTP_METHODS) {
      const operation = item[method];
      if (!operation) continue;
      operation.operationId ??= operationIdOf(method, path);
      if (!path.startsWith('/dpc/v1/')) operation.security ??= [];
      for (const parameter of operation.parameters ?? []) {
        if (parameter.in === 'query' && parameter.schema?.default !== undefined) parameter.required = false;
      }
    }
  }
  return document;
}

/**
 * The OpenAPI 3.1 document, made from the route schemas that also validate requests and serialize
 * answers, at /dpc/openapi.json, and a reference page over it at /dpc/docs.
 */
export const openApiPlugin = fp(async (app: FastifyInstance) => {
  app.addSchema(ProblemDetail);
  app.addHook('onRoute', addCommonProblems);
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Project Platform Management API',
        version: '1.0',
        description:
          'Projects and what hangs off them. Every operation needs `Authorization: Bearer <ACCESS_TOKEN>`; ' +
          'obtain a token with the client-credentials grant at `POST /oauth/dpc/token`. Errors are RFC 9457 ' +
          '`application/problem+json`.',
      },
      servers: [{ url: '/', description: 'this deployment' }],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        },
      },
    },
    refResolver: { buildLocalReference: (json, _base, _fragment, i) => String(json.$id ?? `def-${i}`) },
    transformObject: (documentObject) =>
      settleOperations((documentObject as unknown as { openapiObject: OpenApiDocument }).openapiObject) as never,
  });
  await app.register(swaggerUi, { routePrefix: '/dpc/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
  app.get('/dpc/openapi.json', { schema: { hide: true } }, async () => app.swagger());
});
