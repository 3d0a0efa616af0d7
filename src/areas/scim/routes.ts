import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { noContent, problems } from '../../core/openapi.ts';
import { answerError, sendProblem, type ErrorSender } from '../../core/errors-plugin.ts';
import { emptyIsNoBody } from '../../core/json-bodies.ts';
import { notFound, PROBLEM_CONTENT_TYPE } from '../../core/problems.ts';
import { createDirectoryToken, listDirectoryTokens, revokeDirectoryToken } from '../../core/auth/directory-tokens.ts';
import { ERROR_SCHEMA, GROUP, LIST_RESPONSE_SCHEMA, USER } from './definitions.ts';
import { checkProjection, etagListNames, etagOf, scimError } from './resources.ts';
import { discoveryRoutes } from './discovery.ts';
import {
  createGroup,
  createUser,
  deleteGroup,
  deleteUser,
  getGroup,
  getUser,
  listGroups,
  listUsers,
  patchGroup,
  patchUser,
  projectGrantsOf,
  replaceGroup,
  replaceUser,
  type Answer,
  type ListAnswer,
  type Scope,
} from './service.ts';
import { projectLeavesGroups } from './repository.ts';
import {
  CreatedToken,
  CreateTokenRequest,
  DirectoryToken,
  GroupBody,
  GroupResource,
  ListQuery,
  ListResponse,
  PatchBody,
  ProjectGrant,
  ProjectionQuery,
  ResourceParams,
  SCIM_CONTENT_TYPE,
  SearchBody,
  SCIM_PREFIX,
  TokenParams,
  UserBody,
  UserResource,
  canonicalSearchMembers,
  declareScimErrors,
  scimContent,
  searchListQuery,
  serviceUrl,
} from './schemas.ts';

const SCIM_BASE = `/dpc/v1${SCIM_PREFIX}/`;
const COLLECTION_METHODS = new Set(['GET', 'HEAD', 'POST']);

/**
 * `url` without the trailing slash of a path under the SCIM base, for the methods a collection takes:
 * `GET .../Users/?filter=...` is `GET .../Users?filter=...`. (A PUT, PATCH or DELETE of `.../Users/` names a
 * resource with an empty id, as before.)
 */
export function scimUrlWithoutTrailingSlash(method: string, url: string): string {
  if (!url.startsWith(SCIM_BASE) || !COLLECTION_METHODS.has(method)) return url;
  const query = url.indexOf('?');
  const path = query < 0 ? url : url.slice(0, query);
  if (path.length <= SCIM_BASE.length || !path.endsWith('/')) return url;
  return path.slice(0, -1) + (query < 0 ? '' : url.slice(query));
}

/**
 * Whether a failure is answered in the SCIM error format (RFC 7644 3.12) rather than problem+json: always,
 * unless the client asks for application/problem+json only (every media range of its Accept header is that).
 * A SCIM client accepting any type, application/json, or sending no Accept at all gets a SCIM error.
 */
function wantsScim(request: FastifyRequest): boolean {
  const ranges = (request.headers.accept ?? '')
    .split(',')
    .map((range) => range.split(';')[0].trim().toLowerCase())
    .filter(Boolean);
  return !(ranges.length > 0 && ranges.every((range) => range === PROBLEM_CONTENT_TYPE));
}

const sendScimError: ErrorSender = (_request, reply, status, detail, options = {}) => {
  if (options.headers) reply.headers(options.headers);
  const body = {
    schemas: [ERROR_SCHEMA],
    status: String(status),
    ...(options.scimType && { scimType: options.scimType }),
    // RFC 7644's error has no member for violations: they are told in the detail.
    detail: options.violations?.length ? `${detail} ${options.violations.join('; ')}` : detail,
  };
  // Serialized here: the route's response schemas describe the problem+json form of errors.
  return reply.code(status).type(SCIM_CONTENT_TYPE).send(JSON.stringify(body));
};

/** Fastify's parser refusing a body; its message names application/json whatever was sent. */
const NOT_JSON = new Set(['FST_ERR_CTP_INVALID_JSON_BODY', 'FST_ERR_CTP_EMPTY_JSON_BODY']);

/** A request that fails its schema (the only failure with violations) is malformed: scimType invalidSyntax (RFC 7644 3.12). */
const malformedIsInvalidSyntax =
  (send: ErrorSender): ErrorSender =>
  (request, reply, status, detail, options = {}) =>
    send(request, reply, status, detail, options.violations ? { scimType: 'invalidSyntax', ...options } : options);

function scopeOf(request: FastifyRequest): Scope {
  const { db, dialect } = request.server.store;
  return { db, dialect, accountId: request.principal.accountId, base: serviceUrl(request) };
}

/** A resource's answer; `created` is the URL of a new one (its meta may not be answered: attributes=userName). */
function sendResource(reply: FastifyReply, answer: Answer, created?: string) {
  reply
    .code(created ? 201 : 200)
    .type(SCIM_CONTENT_TYPE)
    .header('etag', etagOf(answer.version));
  if (created) reply.header('location', created);
  return reply.send(answer.resource);
}

function sendList(reply: FastifyReply, answer: ListAnswer) {
  return reply.type(SCIM_CONTENT_TYPE).send({ schemas: [LIST_RESPONSE_SCHEMA], ...answer });
}

/** The SCIM service provider of the account: Users, Groups and the discovery documents; admins and directory tokens only. */
async function scimRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.addContentTypeParser(SCIM_CONTENT_TYPE, { parseAs: 'string' }, emptyIsNoBody(app));
  app.setErrorHandler((error: FastifyError, request, reply) =>
    answerError(
      NOT_JSON.has(error.code) ? scimError(400, 'invalidSyntax', 'The body is not a JSON value.') : error,
      request,
      reply,
      malformedIsInvalidSyntax(wantsScim(request) ? sendScimError : sendProblem),
    ),
  );
  // Unknown paths and methods under the SCIM base are SCIM errors too.
  app.setNotFoundHandler((request, reply) => app.answerNoRoute(request, reply, wantsScim(request) ? sendScimError : sendProblem));
  app.addHook('onRoute', (route) => {
    route.config = { ...route.config, role: 'admin', directoryIntegration: true };
    // The server's failures were declared by the OpenAPI plugin's own onRoute hook, which runs first.
    const response = route.schema?.response as Parameters<typeof declareScimErrors>[0] | undefined;
    if (response) declareScimErrors(response);
  });

  const resources = [
    { name: 'User', path: '/Users', resource: UserResource, body: UserBody, tags: ['Directory integration (SCIM Users)'] },
    { name: 'Group', path: '/Groups', resource: GroupResource, body: GroupBody, tags: ['Directory integration (SCIM Groups)'] },
  ] as const;
  const operations = {
    User: { list: listUsers, create: createUser, get: getUser, replace: replaceUser, patch: patchUser, remove: deleteUser },
    Group: {
      list: listGroups,
      create: createGroup,
      get: getGroup,
      replace: replaceGroup,
      patch: patchGroup,
      remove: deleteGroup,
    },
  };

  for (const { name, path, resource, body, tags } of resources) {
    const run = operations[name];
    const ifMatch = (request: FastifyRequest) => request.headers['if-match'];
    const checked = <Q extends { attributes?: string; excludedAttributes?: string }>(query: Q) => {
      checkProjection(name === 'User' ? USER : GROUP, query);
      return query;
    };

    app.get(
      path,
      {
        schema: {
          summary: `List ${name}s: filter, sort, page, choose attributes (RFC 7644 3.4.2)`,
          tags,
          querystring: ListQuery,
          response: { 200: scimContent(ListResponse(resource), `a ListResponse of ${name}s`) },
        },
      },
      async (request, reply) => sendList(reply, await run.list(scopeOf(request), request.query)),
    );

    app.post(
      `${path}/.search`,
      {
        schema: {
          summary: `Search ${name}s with a SearchRequest body: the list's parameters sent as POST (RFC 7644 3.4.3)`,
          tags,
          body: SearchBody,
          response: { 200: scimContent(ListResponse(resource), `a ListResponse of ${name}s`) },
        },
        config: { readOnly: true },
        preValidation: async (request) => {
          request.body = canonicalSearchMembers(request.body) as SearchBody;
        },
      },
      async (request, reply) => sendList(reply, await run.list(scopeOf(request), searchListQuery(request.body))),
    );

    app.post(
      path,
      {
        schema: {
          summary: `Create a ${name} (RFC 7644 3.3)`,
          tags,
          querystring: ProjectionQuery,
          body,
          response: { 201: scimContent(resource, `the ${name} created`), ...problems(409) },
        },
      },
      async (request, reply) => {
        const answer = await run.create(scopeOf(request), request.body, checked(request.query));
        request.auditIds.id = answer.resource.id as string;
        return sendResource(reply, answer, `${serviceUrl(request)}${path}/${answer.resource.id}`);
      },
    );

    app.get(
      `${path}/:id`,
      {
        schema: {
          summary: name === 'User' ? 'Read a User' : 'Read a Group',
          tags,
          params: ResourceParams,
          querystring: ProjectionQuery,
          response: {
            200: scimContent(resource, `the ${name}; ETag carries its version`),
            304: { type: 'null', description: 'If-None-Match named the current version' },
          },
        },
      },
      async (request, reply) => {
        const answer = await run.get(scopeOf(request), request.params.id, request.query);
        const ifNoneMatch = request.headers['if-none-match'];
        if (ifNoneMatch !== undefined && etagListNames(ifNoneMatch, answer.version)) {
          return reply.code(304).header('etag', etagOf(answer.version)).send();
        }
        return sendResource(reply, answer);
      },
    );

    app.put(
      `${path}/:id`,
      {
        schema: {
          summary: `Replace a ${name} (RFC 7644 3.5.1); If-Match is honoured`,
          tags,
          params: ResourceParams,
          querystring: ProjectionQuery,
          body,
          response: { 200: scimContent(resource, `the ${name} as replaced`), ...problems(409, 412) },
        },
      },
      async (request, reply) => {
        // If-None-Match: * asks to write only a resource that does not exist yet (RFC 7232 3.2); this one does.
        if (request.headers['if-none-match'] === '*') {
          await run.get(scopeOf(request), request.params.id, {});
          throw scimError(412, undefined, `${name} ${request.params.id} exists; If-None-Match: * refuses to replace it.`);
        }
        return sendResource(
          reply,
          await run.replace(scopeOf(request), request.params.id, request.body, ifMatch(request), checked(request.query)),
        );
      },
    );

    app.patch(
      `${path}/:id`,
      {
        schema: {
          summary:
            name === 'Group' ? 'Patch a Group: members and attributes, atomically' : 'Patch a User (RFC 7644 3.5.2), atomically',
          tags,
          params: ResourceParams,
          querystring: ProjectionQuery,
          body: PatchBody,
          response: { 200: scimContent(resource, `the ${name} as patched`), ...problems(409, 412) },
        },
      },
      async (request, reply) =>
        sendResource(
          reply,
          await run.patch(scopeOf(request), request.params.id, request.body, ifMatch(request), checked(request.query)),
        ),
    );

    app.delete(
      `${path}/:id`,
      {
        schema: {
          summary: `Delete a ${name} (RFC 7644 3.6); If-Match is honoured`,
          tags,
          params: ResourceParams,
          response: { ...noContent(`the ${name} is deleted`), ...problems(412) },
        },
      },
      async (request, reply) => {
        await run.remove(scopeOf(request), request.params.id, ifMatch(request));
        return reply.code(204).send(null);
      },
    );
  }

  // A search across every resource type (RFC 7644 3.4.3, the root's .search) is not offered: 501, as the RFC
  // says, in the SCIM form. Not an operation, so left out of the OpenAPI document (which lists what is served).
  app.post(
    '/.search',
    {
      schema: {
        summary: 'Search across resource types from the root: not implemented (501); search /Users/.search or /Groups/.search',
        hide: true,
      },
      config: { readOnly: true },
    },
    async () => {
      throw scimError(501, undefined, 'Searching from the root is not implemented; search /Users/.search or /Groups/.search.');
    },
  );

  await app.register(discoveryRoutes);
}

/** Directory integration: its tokens, the project grants of directory users, and the SCIM service provider. */
export async function directoryIntegrationRoutes(fastify: FastifyInstance): Promise<void> {
  // A deleted project leaves the groups that name it, in the deleting transaction.
  fastify.projectDeletion.inTransaction('scim', projectLeavesGroups);
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const tags = ['Directory integration (tokens)'];
  const config = { role: 'admin' as const };

  app.post(
    '/directory-integration/tokens',
    {
      config,
      schema: {
        summary: 'Create a directory-integration token: a long-lived bearer token for SCIM only; shown once',
        tags,
        body: CreateTokenRequest,
        response: { 201: CreatedToken },
      },
    },
    async (request, reply) => {
      const created = await app.store.db
        .transaction()
        .execute((trx) => createDirectoryToken(trx, request.principal.accountId, request.body.name));
      request.auditIds.tokenId = created.id;
      return reply
        .code(201)
        .header('location', `${request.url.split('?')[0]}/${created.id}`)
        .send(created);
    },
  );

  app.get(
    '/directory-integration/tokens',
    {
      config,
      schema: {
        summary: "List the account's directory-integration tokens (never their secrets)",
        tags,
        response: { 200: Type.Array(DirectoryToken) },
      },
    },
    async (request) => listDirectoryTokens(app.store.db, request.principal.accountId),
  );

  app.delete(
    '/directory-integration/tokens/:tokenId',
    {
      config,
      schema: {
        summary: 'Revoke a directory-integration token: it stops working at once',
        tags,
        params: TokenParams,
        response: { 200: DirectoryToken },
      },
    },
    async (request) => {
      const revoked = await app.store.db
        .transaction()
        .execute((trx) => revokeDirectoryToken(trx, request.principal.accountId, request.params.tokenId));
      if (!revoked) throw notFound(`Directory-integration token ${request.params.tokenId} does not exist.`);
      return revoked;
    },
  );

  app.get(
    '/directory-integration/users/:id/project-grants',
    {
      config,
      schema: {
        summary: "The project roles a directory user holds through its groups' projectId and role (recorded, not enforced)",
        tags,
        params: ResourceParams,
        response: { 200: Type.Array(ProjectGrant) },
      },
    },
    async (request) => projectGrantsOf(scopeOf(request), request.params.id),
  );

  await app.register(scimRoutes, { prefix: SCIM_PREFIX });
}
