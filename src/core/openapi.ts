import { existsSync, readdirSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import type { FastifyInstance, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { PROBLEM_CONTENT_TYPE, ProblemDetail, STATUS_TITLES } from './problems.ts';

/**
 * Problems any documented operation may answer: the rate limit (identity and /dpc/v1 are counted), headers too
 * large (the HTTP parser), a crash, and a busy store or a server shutting down. Routes declare the rest
 * (409, 422, ...) themselves.
 */
const EVERY_OPERATION_PROBLEMS = [429, 431, 500, 503];
/** Problems of every operation that takes a token: validation, the bearer token, the role (or kind of token). */
const TOKEN_PROBLEMS = [400, 401, 403];
/** Every /dpc/v1 operation may also name a resource that is not there (a project, most often). */
const V1_PROBLEMS = [404];
/** A path segment longer than the router takes (see maxParamLength in app.ts). */
const PATH_PARAMETER_PROBLEMS = [414];
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

type Schema = Record<string, unknown>;

function pascal(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function isObject(value: unknown): value is Schema {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A schema worth a name of its own: an object, an array or a composition (not a lone string or number). */
function isStructured(value: unknown): value is Schema {
  return (
    isObject(value) &&
    (value.type === 'object' || value.type === 'array' || ['anyOf', 'oneOf', 'allOf'].some((key) => key in value))
  );
}

/**
 * The exported names of the areas' schemas (`src/areas/<area>/schemas.ts`), by schema object. A body or an
 * answer that is one of them, or holds one, is published under that name, so that generated clients get the
 * type names the code uses and an area declares nothing for it. Where areas export different schemas under
 * one name, the area named after it keeps the name and the others put their area's name first
 * (SecretReference of secret-references; ConnectorsSecretReference of connectors).
 */
async function exportedSchemaNames(): Promise<Map<object, string>> {
  const areas = new URL('../areas/', import.meta.url);
  const folders = readdirSync(areas, { withFileTypes: true }).filter((entry) => entry.isDirectory());
  const exported: { area: string; name: string; schema: object }[] = [];
  for (const folder of folders.map((entry) => entry.name).sort()) {
    const file = new URL(`${folder}/schemas.ts`, areas);
    if (!existsSync(file)) continue;
    const module = (await import(file.href)) as Record<string, unknown>;
    const area = folder.split('-').map(pascal).join('');
    for (const [name, schema] of Object.entries(module)) {
      if (isStructured(schema) && !exported.some((entry) => entry.schema === schema)) exported.push({ area, name, schema });
    }
  }
  const names = new Map<object, string>();
  for (const { area, name, schema } of exported) {
    const namesakes = exported.filter((entry) => entry.name === name);
    const owner = namesakes.find((entry) => entry.area.startsWith(name)) ?? namesakes[0];
    names.set(schema, owner.schema === schema ? name : `${area}${name}`);
  }
  return names;
}

/** Keywords whose values are data, not subschemas. */
const DATA_KEYWORDS = new Set(['examples', 'example', 'default', 'const', 'enum', 'required']);

/**
 * `schema` with a `title` on itself and on every subschema that has an exported name; copied where it
 * changes, so the areas' schema objects stay as they are.
 */
function titled(schema: unknown, names: Map<object, string>): unknown {
  if (Array.isArray(schema)) {
    const items = schema.map((item) => titled(item, names));
    return items.some((item, i) => item !== schema[i]) ? items : schema;
  }
  if (!isObject(schema)) return schema;
  let copy: Schema | undefined;
  for (const [key, value] of Object.entries(schema)) {
    if (DATA_KEYWORDS.has(key)) continue;
    const mapped = titled(value, names);
    if (mapped !== value) (copy ??= { ...schema })[key] = mapped;
  }
  const name = names.get(schema);
  if (name !== undefined && schema.title === undefined && schema.$id === undefined) (copy ??= { ...schema }).title = name;
  return copy ?? schema;
}

/**
 * Every documented operation needs a bearer token unless its schema says `security: []` (the token endpoint
 * and the JWKS do), and declares the problems the server can answer to it.
 */
function declareProblems(route: RouteOptions): void {
  const schema = (route.schema ??= {}) as NonNullable<RouteOptions['schema']> & { security?: unknown[] };
  const response = (schema.response ??= {}) as Record<string, unknown>;
  const security = (schema.security ??= [{ bearerAuth: [] }]);
  const statuses = [
    ...(security.length > 0 ? TOKEN_PROBLEMS : []),
    ...(route.url.startsWith('/dpc/v1') ? V1_PROBLEMS : []),
    ...(route.url.includes(':') ? PATH_PARAMETER_PROBLEMS : []),
    ...(schema.body || route.method === 'POST' ? BODY_PROBLEMS : []),
    ...EVERY_OPERATION_PROBLEMS,
  ];
  for (const status of statuses) response[status] ??= problemResponse(status);
}

/** Titles the body and every answer of a documented route with the exported names of its schemas. */
function nameSchemas(route: RouteOptions, names: Map<object, string>): void {
  const schema = route.schema!;
  if (schema.body) schema.body = titled(schema.body, names);
  const response = schema.response as Record<string, unknown>;
  // An answer given as an OpenAPI response object ({description, content}) has its content's schemas titled.
  for (const [status, answer] of Object.entries(response)) response[status] = titled(answer, names);
}

interface OpenApiMediaType {
  schema?: Schema;
}
interface OpenApiResponse {
  description?: string;
  headers?: Record<string, unknown>;
  content?: Record<string, OpenApiMediaType>;
}
interface OpenApiOperation {
  operationId?: string;
  security?: unknown[];
  tags?: string[];
  parameters?: { in: string; required?: boolean; schema?: { default?: unknown } }[];
  requestBody?: { content?: Record<string, OpenApiMediaType> };
  responses?: Record<string, OpenApiResponse>;
}
type OpenApiDocument = {
  paths?: Record<string, Record<string, OpenApiOperation>>;
  components?: { schemas?: Record<string, Schema> };
  tags?: { name: string; description?: string }[];
} & Record<string, unknown>;

function withoutExamples({ examples: _, ...schema }: Schema): Schema {
  return schema;
}

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
      return pascal(word);
    });
  return method + words.join('');
}

const SUCCESS_TITLES: Record<string, string> = { 200: 'OK', 201: 'Created', 202: 'Accepted', 204: 'No Content' };

const RETRY_AFTER = {
  description: 'Seconds to wait before trying again.',
  schema: { type: 'integer', minimum: 0 },
};

/** Headers the server sends with answers of these statuses, whichever the operation. */
const RESPONSE_HEADERS: Record<string, Record<string, unknown>> = {
  201: {
    Location: {
      description: 'Where the created resource is addressed (relative to the server).',
      schema: { type: 'string', format: 'uri-reference' },
    },
  },
  401: {
    'WWW-Authenticate': {
      description: 'The authentication the operation takes (Bearer; Basic at the token endpoint).',
      schema: { type: 'string' },
    },
  },
  429: { 'Retry-After': RETRY_AFTER },
  503: { 'Retry-After': { ...RETRY_AFTER, description: 'Seconds to wait before trying again, where the server knows.' } },
};

/** Where conditional requests and idempotency keys apply: /dpc/v1, but SCIM, which has its own rules. */
const conditionalPath = (path: string) => path.startsWith('/dpc/v1/') && !path.includes('/directory-integration/scim/');

const documentedProblem = (status: number, description?: string): OpenApiResponse => ({
  description: description ?? STATUS_TITLES[status],
  content: { [PROBLEM_CONTENT_TYPE]: { schema: { $ref: '#/components/schemas/ProblemDetail' } } },
});

/**
 * The headers and statuses of conditional requests (core/conditional.ts) and idempotency keys
 * (core/idempotency.ts), which every operation of /dpc/v1 takes the same way.
 */
function declareConditions(path: string, method: string, operation: OpenApiOperation, hasGet: boolean): void {
  if (!conditionalPath(path)) return;
  const parameters = (operation.parameters ??= []) as Record<string, unknown>[];
  const responses = (operation.responses ??= {});
  const header = (name: string, description: string) => {
    if (!parameters.some((p) => p.in === 'header' && String(p.name).toLowerCase() === name.toLowerCase())) {
      parameters.push({ in: 'header', name, required: false, description, schema: { type: 'string', maxLength: 1024 } });
    }
  };
  const streams = Object.keys(responses['200']?.content ?? {}).includes('text/event-stream');
  if (method === 'get' && !streams) {
    header('If-None-Match', 'ETags of answers already held: 304 without a body when the answer would be one of them.');
    responses['304'] ??= { description: 'Not Modified: the answer is the one If-None-Match names.' };
    for (const status of ['200', '304']) {
      const response = responses[status];
      if (response)
        response.headers = {
          ETag: { description: 'A strong entity tag of the answer.', schema: { type: 'string' } },
          ...response.headers,
        };
    }
  }
  if (method === 'post' || method === 'patch') {
    header(
      'Idempotency-Key',
      'A unique key (1 to 255 printable ASCII characters) that makes retries safe: the same key and request within 24 hours answer as the first did, without doing it again.',
    );
    responses['409'] ??= documentedProblem(409, 'Conflict (or a request with the same Idempotency-Key is still in progress).');
    responses['422'] ??= documentedProblem(422, 'Unprocessable Entity (or the Idempotency-Key was sent with another request).');
  }
  if ((method === 'put' || method === 'patch' || method === 'delete') && hasGet) {
    header('If-Match', 'The ETag of the version this change is based on: 412 when the resource has changed since.');
    responses['412'] ??= documentedProblem(412, 'Precondition Failed: the resource is not at the version If-Match names.');
  } else if (method === 'put' || method === 'patch' || method === 'delete') {
    // No GET answers this URL, so there is no ETag to name: the header is refused rather than never matched.
    header('If-Match', 'Not supported here (no GET answers this URL, so it has no ETag): a request that sends it is 400.');
    responses['400'] ??= documentedProblem(400);
  }
}

/**
 * The document's component schemas: bodies and answers move there under a name, so that generated clients get
 * type names. The name is the schema's exported name (its `title`), or for a page or list of a named item
 * `<Item>Page` / `<Item>List`, or else one made of the operation id; a different schema already holding a
 * name gets the next choice.
 */
class ComponentSchemas {
  constructor(
    private readonly schemas: Record<string, Schema>,
    private readonly exportedNames: Set<string>,
  ) {}

  /**
   * A reference to `schema` as a component, under the first free (or same-schema) name of `choices`. Schemas
   * that differ only in `examples` are the same: a body's examples move to its media type.
   */
  private reference(schema: Schema, choices: string[]): Schema {
    const last = choices[choices.length - 1];
    const candidates = [...choices, ...Array.from({ length: 100 }, (_, i) => `${last}${i + 2}`)];
    const name = candidates.find((candidate) => {
      const existing = this.schemas[candidate];
      return existing === undefined || isDeepStrictEqual(withoutExamples(existing), withoutExamples(schema));
    })!;
    if (this.schemas[name]?.examples === undefined) this.schemas[name] = schema;
    return { $ref: `#/components/schemas/${name}` };
  }

  private componentName(ref: unknown): string | undefined {
    return typeof ref === 'string' ? /^#\/components\/schemas\/(.+)$/.exec(ref)?.[1] : undefined;
  }

  /** `schema` with every subschema titled by an exported name replaced by a reference to its component. */
  private hoistNested(schema: unknown): unknown {
    if (Array.isArray(schema)) return schema.map((item) => this.hoistNested(item));
    if (!isObject(schema)) return schema;
    const mapped = Object.fromEntries(
      Object.entries(schema).map(([key, value]) => [key, DATA_KEYWORDS.has(key) ? value : this.hoistNested(value)]),
    );
    const title = mapped.title;
    return typeof title === 'string' && this.exportedNames.has(title) ? this.reference(mapped, [title]) : mapped;
  }

  /** The body schema of an operation, as a reference to a component named as the class says. */
  body(schema: Schema, fallbackName: string): Schema {
    if (schema.$ref !== undefined) return schema;
    const hoisted = this.hoistNested(schema) as Schema;
    if (hoisted.$ref !== undefined || !isStructured(hoisted)) return hoisted;
    const properties = hoisted.properties as Record<string, Schema> | undefined;
    const pageOf = this.componentName((properties?.results?.items as Schema | undefined)?.$ref);
    const listOf = hoisted.type === 'array' ? this.componentName((hoisted.items as Schema | undefined)?.$ref) : undefined;
    const choices = [pageOf && `${pageOf}Page`, listOf && `${listOf}List`, fallbackName].filter((name): name is string =>
      Boolean(name),
    );
    return this.reference(hoisted, choices);
  }
}

/**
 * What the route schemas cannot say alone: a query parameter with a default is optional (the schema's
 * `required` lists it because the validator fills it in), every operation has a stable operationId, bodies and answers are
 * named component schemas, every answer has a description, and the headers of 201, 401, 429 and 503 are declared.
 */
function settleOperations(document: OpenApiDocument, exportedNames: Set<string>): OpenApiDocument {
  const components = (document.components ??= {});
  const schemas = new ComponentSchemas((components.schemas ??= {}), exportedNames);
  const tags = new Set<string>();
  for (const [path, item] of Object.entries(document.paths ?? {})) {
    for (const method of HTTP_METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const operationId = (operation.operationId ??= operationIdOf(method, path));
      declareConditions(path, method, operation, Boolean(item.get));
      for (const tag of operation.tags ?? []) tags.add(tag);
      for (const parameter of operation.parameters ?? []) {
        if (parameter.in === 'query' && parameter.schema?.default !== undefined) parameter.required = false;
      }
      for (const media of Object.values(operation.requestBody?.content ?? {})) {
        if (media.schema) media.schema = schemas.body(media.schema, `${pascal(operationId)}Request`);
      }
      const responses = Object.entries(operation.responses ?? {});
      const successes = responses.filter(([status]) => status.startsWith('2')).length;
      for (const [status, response] of responses) {
        if (!response.description || response.description === 'Default Response') {
          response.description = SUCCESS_TITLES[status] ?? STATUS_TITLES[Number(status)] ?? `HTTP ${status}`;
        }
        if (RESPONSE_HEADERS[status]) response.headers = { ...RESPONSE_HEADERS[status], ...response.headers };
        const name = `${pascal(operationId)}${successes > 1 || !status.startsWith('2') ? status : ''}Response`;
        for (const media of Object.values(response.content ?? {})) {
          if (media.schema) media.schema = schemas.body(media.schema, name);
        }
      }
    }
  }
  document.tags = [...tags].sort().map((name) => ({ name, description: `Operations on ${name}.` }));
  return document;
}

/**
 * The OpenAPI 3.1 document, made from the route schemas that also validate requests and serialize
 * answers, at /dpc/openapi.json, and a reference page over it at /dpc/docs.
 */
export const openApiPlugin = fp(async (app: FastifyInstance) => {
  const names = await exportedSchemaNames();
  app.addSchema(ProblemDetail);
  app.addHook('onRoute', (route) => {
    if (route.schema?.hide || route.url.startsWith('/dpc/docs')) return;
    declareProblems(route);
    nameSchemas(route, names);
  });
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
      settleOperations(
        (documentObject as unknown as { openapiObject: OpenApiDocument }).openapiObject,
        new Set(names.values()),
      ) as never,
  });
  await app.register(swaggerUi, { routePrefix: '/dpc/docs', uiConfig: { docExpansion: 'list', deepLinking: true } });
  app.get('/dpc/openapi.json', { schema: { hide: true } }, async () => app.swagger());
});
