import type { FastifyRequest } from 'fastify';
import { Type, type Static, type TSchema } from 'typebox';
import {
  ERROR_SCHEMA,
  GROUP,
  GROUP_EXTENSION_SCHEMA,
  LIST_RESPONSE_SCHEMA,
  PATCH_OP_SCHEMA,
  SEARCH_REQUEST_SCHEMA,
  USER,
  groupExtensionAttributes,
  metaAttribute,
  type AttributeDefinition,
  type ResourceKind,
} from './definitions.ts';
import { scimError } from './resources.ts';

export const SCIM_CONTENT_TYPE = 'application/scim+json';
/** Where the SCIM service provider is served, under /dpc/v1. */
export const SCIM_PREFIX = '/directory-integration/scim/v2';

/** The absolute URL of the service provider as the client reached it, for meta.location and $ref. */
export function serviceUrl(request: FastifyRequest): string {
  return `${request.protocol}://${request.host}/dpc/v1${SCIM_PREFIX}`;
}

// ---- Directory-integration tokens

export const TokenParams = Type.Object({ tokenId: Type.String({ format: 'uuid' }) });

export const CreateTokenRequest = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 255, description: 'what the token is for, e.g. the identity provider' }) },
  { examples: [{ name: 'Okta provisioning' }] },
);

export const DirectoryToken = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    createdAt: Type.String({ format: 'date-time' }),
    revokedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  {
    examples: [
      {
        id: '5b0c3a44-8a4e-4a2b-9d86-9d6f1fb1d1a1',
        name: 'Okta provisioning',
        createdAt: '2026-11-23T08:00:00.000Z',
        revokedAt: null,
      },
    ],
  },
);

export const CreatedToken = Type.Object(
  { ...DirectoryToken.properties, token: Type.String({ description: 'the bearer token; shown once, never again' }) },
  {
    examples: [
      {
        id: '5b0c3a44-8a4e-4a2b-9d86-9d6f1fb1d1a1',
        name: 'Okta provisioning',
        createdAt: '2026-11-23T08:00:00.000Z',
        revokedAt: null,
        token: 'dpcdir_5b0c3a44-8a4e-4a2b-9d86-9d6f1fb1d1a1.Vq3dE0yq3y2m7mKJc9wJ0bX1a1Hn6w2m1Xq5cQy9s3A',
      },
    ],
  },
);

// ---- SCIM resources, their JSON Schema derived from the SCIM schema definitions

function jsonSchemaOf(definition: AttributeDefinition): Record<string, unknown> {
  const description = definition.description;
  let schema: Record<string, unknown>;
  if (definition.type === 'complex') {
    const subs = definition.subAttributes ?? [];
    // "$ref" cannot be a key of `properties`: schema tools read it as a reference. A pattern says the same.
    const references = subs.filter((sub) => sub.name === '$ref');
    schema = {
      type: 'object',
      properties: Object.fromEntries(subs.filter((sub) => sub.name !== '$ref').map((sub) => [sub.name, jsonSchemaOf(sub)])),
      ...(references.length > 0 && { patternProperties: { '^\\$ref$': jsonSchemaOf(references[0]) } }),
    };
  } else if (definition.type === 'boolean') schema = { type: 'boolean' };
  else if (definition.type === 'dateTime') schema = { type: 'string', format: 'date-time' };
  else schema = { type: 'string', ...(definition.canonicalValues && { examples: definition.canonicalValues }) };
  return definition.multiValued ? { type: 'array', items: schema, description } : { ...schema, description };
}

/**
 * The answered shape of a resource: only attributes that are ever returned (a password never is). Extension
 * attributes are answered only inside the object keyed by their schema URN (RFC 7643 3.3), never at the top level.
 */
function resourceSchema(kind: ResourceKind, example: Record<string, unknown>): TSchema {
  const returned = kind.attributes.filter((a) => a.returned !== 'never' && !groupExtensionAttributes.includes(a));
  const properties: Record<string, unknown> = {
    schemas: { type: 'array', items: { type: 'string' } },
    ...Object.fromEntries(returned.map((a) => [a.name, jsonSchemaOf(a)])),
    meta: jsonSchemaOf(metaAttribute),
  };
  if (kind.extensions.includes(GROUP_EXTENSION_SCHEMA)) {
    properties[GROUP_EXTENSION_SCHEMA] = {
      type: 'object',
      description: 'the extension fields (RFC 7643 3.3): only here, never at the top level',
      properties: Object.fromEntries(groupExtensionAttributes.map((a) => [a.name, jsonSchemaOf(a)])),
    };
  }
  return Type.Unsafe({ type: 'object', properties, examples: [example] });
}

const userExample = {
  schemas: [USER.schema],
  id: '2819c223-7f76-453a-919d-413861904646',
  externalId: '00u1abcd',
  userName: 'bjensen@example.com',
  name: { familyName: 'Jensen', givenName: 'Barbara' },
  displayName: 'Babs Jensen',
  active: true,
  emails: [{ value: 'bjensen@example.com', type: 'work', primary: true }],
  groups: [
    {
      value: 'e9e30dba-f08f-4109-8486-d5c6a331660a',
      display: 'Data engineers',
      type: 'DIRECT',
    },
  ],
  meta: {
    resourceType: 'User',
    created: '2026-11-23T08:00:00.000Z',
    lastModified: '2026-11-23T08:00:00.000Z',
    location: 'https://example.com/dpc/v1/directory-integration/scim/v2/Users/2819c223-7f76-453a-919d-413861904646',
    version: 'W/"1"',
  },
};

const groupExample = {
  schemas: [GROUP.schema, GROUP_EXTENSION_SCHEMA],
  id: 'e9e30dba-f08f-4109-8486-d5c6a331660a',
  displayName: 'Data engineers',
  members: [
    {
      value: '2819c223-7f76-453a-919d-413861904646',
      display: 'Babs Jensen',
      type: 'USER',
    },
  ],
  [GROUP_EXTENSION_SCHEMA]: {
    accountId: '4f1e2f7a-0a55-4e0f-b7a8-0e1c7e1b6a3d',
    accountName: 'Acme',
    projectId: 'a6f6a3c2-4b7e-4c55-9b6a-6b2f1d9c0e11',
    projectName: 'Warehouse',
    environment: 'production',
    role: 'developer',
  },
  meta: {
    resourceType: 'Group',
    created: '2026-11-23T08:00:00.000Z',
    lastModified: '2026-11-23T08:05:00.000Z',
    location: 'https://example.com/dpc/v1/directory-integration/scim/v2/Groups/e9e30dba-f08f-4109-8486-d5c6a331660a',
    version: 'W/"3"',
  },
};

export const UserResource = resourceSchema(USER, userExample);
export const GroupResource = resourceSchema(GROUP, groupExample);

/** Bodies are checked by the SCIM codec (names are case-insensitive there, which JSON Schema cannot say). */
function resourceBody(example: Record<string, unknown>, description: string) {
  return Type.Object({}, { additionalProperties: true, description, examples: [example] });
}

const { id: _userId, meta: _userMeta, groups: _groups, ...userWrite } = userExample;
const { id: _groupId, meta: _groupMeta, ...groupWrite } = groupExample;

export const UserBody = resourceBody(
  { ...userWrite, password: 't1meMa$heen' },
  'A SCIM User (RFC 7643 4.1); read-only attributes and attributes of other schemas are ignored.',
);
export const GroupBody = resourceBody(
  { ...groupWrite, members: [{ value: '2819c223-7f76-453a-919d-413861904646' }] },
  'A SCIM Group (RFC 7643 4.2) with the extension fields at the top level or in their extension object.',
);

export const PatchBody = Type.Object(
  {},
  {
    additionalProperties: true,
    description: `A PatchOp message (RFC 7644 3.5.2): schemas must contain ${PATCH_OP_SCHEMA}; Operations in order, all or nothing.`,
    examples: [
      {
        schemas: [PATCH_OP_SCHEMA],
        Operations: [
          { op: 'add', path: 'members', value: [{ value: '2819c223-7f76-453a-919d-413861904646' }] },
          { op: 'remove', path: 'members[value eq "902c246b-6245-4190-8e05-00816be7344a"]' },
          { op: 'replace', path: 'displayName', value: 'Data engineers' },
        ],
      },
    ],
  },
);

// Ids are UUIDs; a longer one names no resource (404), it is not malformed.
export const ResourceParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 1024 }) });

export const Projection = {
  attributes: Type.Optional(
    Type.String({ maxLength: 2048, description: 'comma-separated attribute paths to answer (and id, schemas)' }),
  ),
  excludedAttributes: Type.Optional(
    Type.String({ maxLength: 2048, description: 'comma-separated attribute paths not to answer' }),
  ),
};
export const ProjectionQuery = Type.Object(Projection);

/** What chooses a page of a list, as query parameters of GET or members of a SearchRequest. */
const Listing = {
  filter: Type.Optional(Type.String({ maxLength: 4096, description: 'RFC 7644 3.4.2.2 filter, e.g. userName eq "bjensen"' })),
  startIndex: Type.Optional(Type.Integer({ description: '1-based index of the first result; below 1 reads as 1' })),
  count: Type.Optional(
    Type.Integer({ description: 'results per page: 100 by default, at most 1000; 0 answers only totalResults' }),
  ),
  sortBy: Type.Optional(Type.String({ maxLength: 256 })),
  sortOrder: Type.Optional(Type.Enum(['ascending', 'descending'])),
};

export const ListQuery = Type.Object({ ...Listing, ...Projection });
export type ListQuery = Static<typeof ListQuery>;

const attributePaths = (description: string) =>
  Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 256 }), { maxItems: 100, description }));

/** A query sent as POST .../.search (RFC 7644 3.4.3): the list's parameters in a body, attribute lists as arrays. */
export const SearchBody = Type.Object(
  {
    schemas: Type.Array(Type.String(), { contains: { const: SEARCH_REQUEST_SCHEMA }, maxItems: 10 }),
    ...Listing,
    attributes: attributePaths('attribute paths to answer (and id, schemas)'),
    excludedAttributes: attributePaths('attribute paths not to answer'),
  },
  {
    additionalProperties: false,
    description: `A SearchRequest: schemas must contain ${SEARCH_REQUEST_SCHEMA}; member names are case-insensitive.`,
    examples: [
      { schemas: [SEARCH_REQUEST_SCHEMA], filter: 'userName sw "b"', startIndex: 1, count: 10, attributes: ['userName'] },
    ],
  },
);
export type SearchBody = Static<typeof SearchBody>;

/** The list query a SearchRequest asks for. */
export function searchListQuery({ schemas: _schemas, attributes, excludedAttributes, ...listing }: SearchBody): ListQuery {
  return { ...listing, attributes: attributes?.join(','), excludedAttributes: excludedAttributes?.join(',') };
}

/**
 * SCIM member names are case-insensitive (RFC 7643 2.1): a SearchRequest's are renamed to the schema's
 * spelling before it is checked, so that "startindex" is startIndex. An unknown member is refused
 * rather than dropped: a misspelt "filtr" would otherwise list the whole directory.
 */
export function canonicalSearchMembers(body: unknown): unknown {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return body;
  const names = new Map(Object.keys(SearchBody.properties).map((name) => [name.toLowerCase(), name]));
  const canonical: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) {
    const name = names.get(key.toLowerCase());
    if (!name) {
      throw scimError(400, 'invalidSyntax', `A SearchRequest has no member "${key}"; it has ${[...names.values()].join(', ')}.`);
    }
    // "filter" and "FILTER" both sent: which one was meant cannot be told.
    if (name in canonical) throw scimError(400, 'invalidSyntax', `The SearchRequest gives ${name} twice.`);
    canonical[name] = value;
  }
  return canonical;
}

export function ListResponse(item: TSchema) {
  return Type.Object({
    schemas: Type.Array(Type.String(), { examples: [[LIST_RESPONSE_SCHEMA]] }),
    totalResults: Type.Integer(),
    startIndex: Type.Integer(),
    itemsPerPage: Type.Integer(),
    Resources: Type.Array(item),
  });
}

/** Discovery documents (/ServiceProviderConfig, /ResourceTypes, /Schemas): SCIM's own shapes, answered as built. */
export const DiscoveryDocument = Type.Object({}, { additionalProperties: true });

export const ProjectGrant = Type.Object({
  projectId: Type.String(),
  projectName: Type.String(),
  role: Type.String(),
  groupId: Type.String(),
});

/**
 * RFC 7644 3.12: a failure, as answered to a client that asks for application/scim+json. Titled here:
 * declareScimErrors adds it after the OpenAPI plugin has named the route's schemas by their exports.
 */
export const ScimError = Type.Object(
  {
    schemas: Type.Array(Type.Literal(ERROR_SCHEMA)),
    status: Type.String({ description: 'the HTTP status code, as a string' }),
    scimType: Type.Optional(
      Type.String({
        description: 'the SCIM error keyword where one fits: invalidFilter, invalidPath, invalidValue, noTarget, uniqueness, ...',
      }),
    ),
    detail: Type.String({ description: 'what went wrong' }),
  },
  { title: 'ScimError' },
);

/**
 * Adds the SCIM form of every failure of a route to its documented answers: a SCIM client that asks for
 * application/scim+json gets a ScimError, any other client a ProblemDetail.
 */
export function declareScimErrors(response: Record<string, { content?: Record<string, unknown> }>): void {
  for (const [status, answer] of Object.entries(response)) {
    if (Number(status) >= 400 && answer.content) answer.content[SCIM_CONTENT_TYPE] = { schema: ScimError };
  }
}

export function scimContent(schema: TSchema, description: string) {
  return { description, content: { [SCIM_CONTENT_TYPE]: { schema } } };
}
