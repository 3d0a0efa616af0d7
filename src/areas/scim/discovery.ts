/** The discovery documents of RFC 7644 section 4: what this service provider supports, exactly. */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { GROUP, LIST_RESPONSE_SCHEMA, MAX_RESULTS, SCHEMAS, USER, type ResourceKind } from './definitions.ts';
import { problems } from '../../core/openapi.ts';
import { scimError } from './resources.ts';
import { DiscoveryDocument, SCIM_CONTENT_TYPE, scimContent, serviceUrl } from './schemas.ts';

const SERVICE_PROVIDER_CONFIG_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig';
const RESOURCE_TYPE_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:ResourceType';
const SCHEMA_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Schema';
const absolute = (request: FastifyRequest, path: string) => `${serviceUrl(request)}${path}`;

function resourceType(request: FastifyRequest, kind: ResourceKind) {
  return {
    schemas: [RESOURCE_TYPE_SCHEMA],
    id: kind.type,
    name: kind.type,
    endpoint: kind.endpoint,
    description: kind.type === 'User' ? 'User Account' : 'Group, which may grant a role in a project to its members',
    schema: kind.schema,
    ...(kind.extensions.length > 0 && { schemaExtensions: kind.extensions.map((schema) => ({ schema, required: false })) }),
    meta: { resourceType: 'ResourceType', location: absolute(request, `/ResourceTypes/${kind.type}`) },
  };
}

function schemaResource(request: FastifyRequest, schema: (typeof SCHEMAS)[number]) {
  return {
    schemas: [SCHEMA_SCHEMA],
    ...schema,
    meta: { resourceType: 'Schema', location: absolute(request, `/Schemas/${schema.id}`) },
  };
}

const listOf = (resources: unknown[]) => ({
  schemas: [LIST_RESPONSE_SCHEMA],
  totalResults: resources.length,
  startIndex: 1,
  itemsPerPage: resources.length,
  Resources: resources,
});

export async function discoveryRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const tags = ['Directory integration (SCIM discovery)'];
  const document = (description: string) => ({ 200: scimContent(DiscoveryDocument, description), ...problems(403) });
  // RFC 7644 4: discovery endpoints take no filter, and a server that is given one should answer 403.
  app.addHook('preHandler', async (request) => {
    if ((request.query as Record<string, unknown>).filter !== undefined) {
      throw scimError(403, undefined, 'Discovery documents take no filter (RFC 7644 4).');
    }
  });

  app.get(
    '/ServiceProviderConfig',
    {
      schema: {
        summary: 'What this SCIM service provider supports (RFC 7643 5)',
        tags,
        response: document('ServiceProviderConfig'),
      },
    },
    async (request, reply) =>
      reply.type(SCIM_CONTENT_TYPE).send({
        schemas: [SERVICE_PROVIDER_CONFIG_SCHEMA],
        documentationUri: `${request.protocol}://${request.host}/dpc/docs`,
        patch: { supported: true },
        bulk: { supported: false, maxOperations: 0, maxPayloadSize: 0 },
        filter: { supported: true, maxResults: MAX_RESULTS },
        changePassword: { supported: true },
        sort: { supported: true },
        etag: { supported: true },
        authenticationSchemes: [
          {
            type: 'oauthbearertoken',
            name: 'Directory-integration token',
            description:
              'Authorization: Bearer <token>, with a directory-integration token an account admin created (or an admin access token).',
            primary: true,
          },
        ],
        meta: { resourceType: 'ServiceProviderConfig', location: absolute(request, '/ServiceProviderConfig') },
      }),
  );

  app.get(
    '/ResourceTypes',
    {
      schema: {
        summary: 'The resource types served: User and Group',
        tags,
        response: document('a ListResponse of ResourceTypes'),
      },
    },
    async (request, reply) =>
      reply.type(SCIM_CONTENT_TYPE).send(listOf([USER, GROUP].map((kind) => resourceType(request, kind)))),
  );

  app.get(
    '/ResourceTypes/:name',
    {
      schema: {
        summary: 'One resource type',
        tags,
        params: Type.Object({ name: Type.String({ maxLength: 64 }) }),
        response: document('a ResourceType'),
      },
    },
    async (request, reply) => {
      const kind = [USER, GROUP].find((k) => k.type === request.params.name);
      if (!kind) throw scimError(404, undefined, `No resource type is named ${request.params.name}.`);
      return reply.type(SCIM_CONTENT_TYPE).send(resourceType(request, kind));
    },
  );

  app.get(
    '/Schemas',
    {
      schema: {
        summary: 'The schemas implemented, attribute by attribute',
        tags,
        response: document('a ListResponse of Schemas'),
      },
    },
    async (request, reply) =>
      reply.type(SCIM_CONTENT_TYPE).send(listOf(SCHEMAS.map((schema) => schemaResource(request, schema)))),
  );

  app.get(
    '/Schemas/:schemaId',
    {
      schema: {
        summary: 'One schema, by its URN',
        tags,
        params: Type.Object({ schemaId: Type.String({ maxLength: 256 }) }),
        response: document('a Schema'),
      },
    },
    async (request, reply) => {
      const schema = SCHEMAS.find((s) => s.id === request.params.schemaId);
      if (!schema) throw scimError(404, undefined, `No schema is ${request.params.schemaId}.`);
      return reply.type(SCIM_CONTENT_TYPE).send(schemaResource(request, schema));
    },
  );
}
