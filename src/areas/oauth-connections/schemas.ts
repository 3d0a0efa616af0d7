import { Type, type Static } from 'typebox';

/**
 * Where a credential is kept in the customer's vault: profiles and OAuth connections hold this,
 * never the credential itself.
 */
export const SecretReference = Type.Object(
  {
    secretName: Type.String({ minLength: 1, maxLength: 255, description: 'name of the vault secret' }),
    secretKey: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'key within the vault secret' })),
  },
  { additionalProperties: false, examples: [{ secretName: 'github-api', secretKey: 'token' }] },
);
export type SecretReference = Static<typeof SecretReference>;

const OAuthConnectionId = Type.String({ format: 'uuid', examples: ['7c1f9f2e-2b8a-4b7e-9a53-0d1c3e7b9a41'] });
export const OAuthConnectionParams = Type.Object({ oauthConnectionId: OAuthConnectionId });

const OAUTH_STATUSES = ['AUTHORIZED', 'PENDING_SETUP'] as const;

const CREATE_EXAMPLE = {
  name: 'Salesforce production',
  grantType: 'AUTHORIZATION_CODE',
  clientId: '3MVG9...',
  clientSecret: { secretName: 'salesforce-app', secretKey: 'clientSecret' },
  authorizationUrl: 'https://login.salesforce.com/services/oauth2/authorize',
  tokenUrl: 'https://login.salesforce.com/services/oauth2/token',
  scopes: ['api', 'refresh_token'],
  tokens: { secretName: 'salesforce-tokens' },
};

export const CreateOAuthConnectionRequest = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 255 }),
    grantType: Type.Enum(['AUTHORIZATION_CODE', 'CLIENT_CREDENTIALS']),
    clientId: Type.String({ minLength: 1, maxLength: 1024 }),
    clientSecret: SecretReference,
    authorizationUrl: Type.Optional(Type.String({ format: 'uri', pattern: '^https?://', maxLength: 2048 })),
    tokenUrl: Type.String({ format: 'uri', pattern: '^https?://', maxLength: 2048 }),
    scopes: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 255 }), { maxItems: 100 })),
    tokens: Type.Optional(
      Type.Object(SecretReference.properties, {
        additionalProperties: false,
        description:
          'where the tokens obtained by setting the connection up are kept; without it the connection is pending setup',
      }),
    ),
  },
  {
    additionalProperties: false,
    examples: [CREATE_EXAMPLE],
  },
);
export type CreateOAuthConnectionRequest = Static<typeof CreateOAuthConnectionRequest>;

export const SetUpOAuthConnectionRequest = Type.Object(
  { tokens: SecretReference },
  { additionalProperties: false, examples: [{ tokens: { secretName: 'salesforce-tokens' } }] },
);
export type SetUpOAuthConnectionRequest = Static<typeof SetUpOAuthConnectionRequest>;

export const OAuthConnection = Type.Object(
  {
    id: OAuthConnectionId,
    name: Type.String(),
    grantType: Type.String(),
    clientId: Type.String(),
    clientSecret: SecretReference,
    authorizationUrl: Type.Optional(Type.String()),
    tokenUrl: Type.String(),
    scopes: Type.Array(Type.String()),
    tokens: Type.Optional(SecretReference),
    status: Type.Enum(OAUTH_STATUSES, {
      description: 'AUTHORIZED can be used to test endpoints; PENDING_SETUP cannot until it is set up',
    }),
    createdAt: Type.String({ format: 'date-time' }),
  },
  {
    examples: [
      {
        id: '7c1f9f2e-2b8a-4b7e-9a53-0d1c3e7b9a41',
        ...CREATE_EXAMPLE,
        status: 'AUTHORIZED',
        createdAt: '2026-11-22T09:30:00.000Z',
      },
    ],
  },
);
export type OAuthConnection = Static<typeof OAuthConnection>;

export const DeleteOAuthConnectionQuery = Type.Object({
  confirm: Type.Optional(
    Type.Boolean({ description: 'must be true: an OAuth connection is deleted only when the caller confirms it' }),
  ),
});
