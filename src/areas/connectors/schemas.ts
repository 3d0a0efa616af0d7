import { Type, type Static, type TSchema } from 'typebox';
import { SecretReference } from '../oauth-connections/index.ts';

const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

const AUTH_TYPES = ['NONE', 'BASIC', 'BEARER', 'API_KEY', 'OAUTH'] as const;

/** One value an authentication option needs: a plain value, or where its secret is kept, or an OAuth connection. */
export const AuthParameter = Type.Object(
  {
    name: Type.String({
      minLength: 1,
      maxLength: 255,
      description:
        'BASIC: username or password; BEARER: token; API_KEY: the key name; OAUTH: the value of the variable that selects this connection',
    }),
    value: Type.Optional(
      Type.String({ maxLength: 1024, description: 'a value that is not a credential: only a BASIC username' }),
    ),
    secret: Type.Optional(SecretReference),
    addTo: Type.Optional(Type.Enum(['QUERY_PARAMETER', 'HEADER_PARAMETER'], { description: 'API_KEY: where the key is sent' })),
    oauthConnectionId: Type.Optional(Type.String({ format: 'uuid', description: 'OAUTH: the connection used' })),
  },
  { additionalProperties: false },
);
export type AuthParameter = Static<typeof AuthParameter>;

export const AuthenticationOption = Type.Object(
  {
    type: Type.Enum(['BASIC', 'BEARER', 'API_KEY', 'OAUTH']),
    parameters: Type.Array(AuthParameter, { maxItems: 50 }),
    additionalParameters: Nullable(
      Type.Record(Type.String(), Type.String({ maxLength: 1024 }), {
        description: 'OAUTH with several connections: {"variable": "<name>"} names the variable that selects one',
      }),
    ),
  },
  { additionalProperties: false },
);
export type AuthenticationOption = Static<typeof AuthenticationOption>;

/** A header, query or URI parameter of an endpoint, with its default value. */
const RequestParameter = Type.Object(
  { name: Type.String({ minLength: 1, maxLength: 255 }), value: Type.Optional(Type.String({ maxLength: 4096 })) },
  { additionalProperties: false },
);
const RequestParameters = Type.Array(RequestParameter, { maxItems: 100 });

const Structure = Type.Object(
  {
    schema: Type.Object({}, { additionalProperties: true, description: 'JSON schema of one answer element' }),
    containedInOuterArray: Type.Boolean(),
    repeatingElementPath: Type.Array(Type.String({ maxLength: 255 }), { maxItems: 50 }),
  },
  { additionalProperties: false },
);

const endpointFields = {
  id: Type.String({ minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9._~-]+$' }),
  name: Type.String({ minLength: 1, maxLength: 255 }),
  url: Type.String({
    maxLength: 2048,
    pattern: '^https?://\\S+$',
    description: 'http(s) URL; {name} in it is replaced by the URI parameter of that name',
  }),
  httpMethod: Type.Enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']),
  auth: Type.Enum(AUTH_TYPES, {
    description: 'the authentication used by default: NONE, or the type of one of authenticationOptions',
  }),
  authTemplate: Nullable(Type.String({ maxLength: 255 })),
  authenticationOptions: Type.Array(AuthenticationOption, { maxItems: 10 }),
  paging: Type.Object(
    {
      type: Type.Enum(['NONE', 'none', 'OFFSET', 'PAGE_NUMBER', 'CURSOR', 'LINK_HEADER'], {
        description: 'NONE or none (the specification spells it so; answered as written) for no paging',
      }),
    },
    { additionalProperties: false },
  ),
  headerParameters: RequestParameters,
  queryParameters: RequestParameters,
  uriParameters: RequestParameters,
  structure: Structure,
  body: Nullable(Type.String({ maxLength: 100_000, description: 'request body sent with the request' })),
};

export const Endpoint = Type.Object(endpointFields, { additionalProperties: false });
export type Endpoint = Static<typeof Endpoint>;

/** An endpoint as written: the id is made when absent, and what is left out is empty. */
export const EndpointInput = Type.Object(
  {
    ...endpointFields,
    id: Type.Optional(endpointFields.id),
    authTemplate: Type.Optional(endpointFields.authTemplate),
    authenticationOptions: Type.Optional(endpointFields.authenticationOptions),
    paging: Type.Optional(endpointFields.paging),
    headerParameters: Type.Optional(RequestParameters),
    queryParameters: Type.Optional(RequestParameters),
    uriParameters: Type.Optional(RequestParameters),
    structure: Type.Optional(Structure),
    body: Type.Optional(endpointFields.body),
  },
  { additionalProperties: false },
);
export type EndpointInput = Static<typeof EndpointInput>;

const Logo = Type.Object(
  {
    type: Type.String({ maxLength: 64 }),
    image: Type.Object({ url: Type.String({ maxLength: 2048 }) }, { additionalProperties: false }),
  },
  { additionalProperties: false },
);

const profileFields = {
  name: Type.String({ minLength: 1, maxLength: 255 }),
  icon: Type.Optional(Type.String({ maxLength: 2048 })),
  logo: Type.Optional(Logo),
  endpoints: Type.Array(Endpoint, { maxItems: 200 }),
  deleted: Type.Boolean(),
  deletedTime: Nullable(Type.String({ format: 'date-time' })),
  lastModified: Type.String({ format: 'date-time' }),
};

const exampleEndpoint: Endpoint = {
  id: 'list-repositories',
  name: 'List repositories',
  url: 'https://api.github.com/orgs/{org}/repos',
  httpMethod: 'GET',
  auth: 'BEARER',
  authTemplate: null,
  authenticationOptions: [
    {
      type: 'BEARER',
      parameters: [{ name: 'token', secret: { secretName: 'github', secretKey: 'token' } }],
      additionalParameters: null,
    },
  ],
  paging: { type: 'LINK_HEADER' },
  headerParameters: [{ name: 'Accept', value: 'application/vnd.github+json' }],
  queryParameters: [{ name: 'per_page', value: '100' }],
  uriParameters: [{ name: 'org' }],
  structure: {
    schema: { type: 'object', properties: { id: { type: 'integer' }, name: { type: 'string' } } },
    containedInOuterArray: true,
    repeatingElementPath: [],
  },
  body: null,
};

/** A profile of the shipped catalogue, keyed by its alternateId. */
export const FlexConnector = Type.Object(
  { alternateId: Type.String({ pattern: '^[a-z0-9-]+$' }), ...profileFields },
  {
    additionalProperties: false,
    examples: [
      {
        alternateId: 'github',
        name: 'GitHub',
        icon: 'https://github.githubassets.com/favicons/favicon.svg',
        logo: { type: 'URL', image: { url: 'https://github.githubassets.com/favicons/favicon.svg' } },
        endpoints: [exampleEndpoint],
        deleted: false,
        deletedTime: null,
        lastModified: '2026-11-01T00:00:00.000Z',
      },
    ],
  },
);
export type FlexConnector = Static<typeof FlexConnector>;

export const CustomConnectorId = Type.String({ format: 'uuid', examples: ['0f4d3b6a-6c1e-4c55-8f0e-2d7e5a9b1c20'] });
export const CustomConnectorParams = Type.Object({ customConnectorId: CustomConnectorId });
export const EndpointParams = Type.Object({ customConnectorId: CustomConnectorId, endpointId: endpointFields.id });

/** A profile of the account, keyed by its id. */
export const CustomConnector = Type.Object(
  { id: CustomConnectorId, ...profileFields },
  {
    additionalProperties: false,
    examples: [
      {
        id: '0f4d3b6a-6c1e-4c55-8f0e-2d7e5a9b1c20',
        name: 'Internal GitHub mirror',
        endpoints: [exampleEndpoint],
        deleted: false,
        deletedTime: null,
        lastModified: '2026-11-22T09:30:00.000Z',
      },
    ],
  },
);
export type CustomConnector = Static<typeof CustomConnector>;

/** What a client writes; a listed profile sent back as it is also fits (id, deleted and times are ignored). */
export const CustomConnectorInput = Type.Object(
  {
    name: profileFields.name,
    icon: profileFields.icon,
    logo: profileFields.logo,
    endpoints: Type.Array(EndpointInput, { maxItems: 200 }),
  },
  {
    additionalProperties: false,
    examples: [
      {
        name: 'Internal GitHub mirror',
        endpoints: [
          {
            name: 'List repositories',
            url: 'https://api.github.com/orgs/{org}/repos',
            httpMethod: 'GET',
            auth: 'BEARER',
            authenticationOptions: [
              {
                type: 'BEARER',
                parameters: [{ name: 'token', secret: { secretName: 'github', secretKey: 'token' } }],
                additionalParameters: null,
              },
            ],
            uriParameters: [{ name: 'org' }],
          },
        ],
      },
    ],
  },
);
export type CustomConnectorInput = Static<typeof CustomConnectorInput>;

export const ListCustomConnectorsQuery = Type.Object({
  includeDeleted: Type.Boolean({ default: false, description: 'also answer deleted profiles' }),
});

export const TestEndpointRequest = Type.Object(
  {
    authType: Type.Optional(Type.Enum(AUTH_TYPES, { description: "the authentication to use; the endpoint's auth by default" })),
    credentials: Type.Optional(
      Type.Record(Type.String(), Type.String({ maxLength: 8192 }), {
        description:
          'values of the secrets the chosen option refers to, by parameter name (password, token, each API key name); OAUTH: accessToken. Used for this request only, never stored.',
      }),
    ),
    variables: Type.Optional(
      Type.Record(Type.String(), Type.String({ maxLength: 1024 }), {
        description: 'values of variables, such as the one selecting an OAuth connection',
      }),
    ),
    uriParameters: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 4096 }))),
    queryParameters: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 4096 }))),
    headerParameters: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 4096 }))),
  },
  {
    additionalProperties: false,
    examples: [{ authType: 'BEARER', credentials: { token: 'ghp_...' }, uriParameters: { org: 'octo-org' } }],
  },
);
export type TestEndpointRequest = Static<typeof TestEndpointRequest>;

export const TestEndpointResponse = Type.Object(
  {
    status: Type.Integer({ description: "the external API's status" }),
    headers: Type.Record(Type.String(), Type.String()),
    body: Type.String({ description: 'the answer body as text, cut off at the deployment limit' }),
    truncated: Type.Boolean({ description: 'whether the body was cut off' }),
  },
  {
    examples: [
      { status: 200, headers: { 'content-type': 'application/json' }, body: '[{"id":1,"name":"hello"}]', truncated: false },
    ],
  },
);
export type TestEndpointResponse = Static<typeof TestEndpointResponse>;
