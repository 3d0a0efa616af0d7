import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';
import { EnvironmentName } from '../environments/index.ts';

export const AUTH_TYPES = [
  'GENERIC_SECRET',
  'CLOUD_PROVIDER_SECRET',
  'OAUTH_USER_TOKENS',
  'OAUTH_AUTHORIZATION_CODE',
  'OAUTH_CLIENT_CRED',
  'COMPOSITE_TOKEN',
  'OAUTH_1_0_X_ADS',
] as const;
export type AuthType = (typeof AUTH_TYPES)[number];
export const PLATFORM_CONNECTION_TYPES = ['COMPONENT_BASIC', 'CLOUD_PLATFORM_CREDENTIALS'] as const;
export type PlatformConnectionType = (typeof PLATFORM_CONNECTION_TYPES)[number];

/** Each vault type and the one field that locates a secret in it (none for the vendor and default vaults). */
export const VAULT_LOCATION_FIELDS = {
  AWS_SECRET_MANAGER: 'region',
  AZURE_SECRET_MANAGER: 'vaultName',
  GCP_SECRET_MANAGER: 'gcpProjectId',
  MATILLION_CUSTOMER_VAULT: null,
  DEFAULT_SECRET_VAULT: null,
} as const;
export type VaultType = keyof typeof VAULT_LOCATION_FIELDS;
const VAULT_TYPES = Object.keys(VAULT_LOCATION_FIELDS) as VaultType[];

const name = (description?: string) => Type.String({ minLength: 1, maxLength: 255, description });
export const ConnectionName = Type.String({ minLength: 1, maxLength: 255, examples: ['warehouse'] });

export const SecretsLocation = Type.Object(
  {
    type: Type.Enum(VAULT_TYPES),
    region: Type.Optional(name('AWS_SECRET_MANAGER: required; other vaults: not allowed')),
    vaultName: Type.Optional(name('AZURE_SECRET_MANAGER: required; other vaults: not allowed')),
    gcpProjectId: Type.Optional(name('GCP_SECRET_MANAGER: required; other vaults: not allowed')),
  },
  { description: 'where the secret is kept, discriminated by type (422 when the fields do not fit the type)' },
);

export const ConnectionProperties = Type.Object(
  {
    secretName: Type.Optional(name('COMPONENT_BASIC: required')),
    secretKey: Type.Optional(Type.String({ maxLength: 255, description: 'COMPONENT_BASIC: optional key within the secret' })),
    credentialSecretName: Type.Optional(name('CLOUD_PLATFORM_CREDENTIALS: the secret holding the cloud credentials')),
  },
  {
    description:
      'takes the shape platformConnectionType asks for (422 otherwise): COMPONENT_BASIC {secretName, secretKey?}, CLOUD_PLATFORM_CREDENTIALS {credentialSecretName?}',
  },
);

export const ConnectionDetails = Type.Object({
  connectionProperties: Type.Optional(ConnectionProperties),
  description: Type.Optional(Type.String({ maxLength: 4000 })),
  secretsLocation: Type.Optional(SecretsLocation),
});
export type ConnectionDetails = Static<typeof ConnectionDetails>;

const detailsExample = {
  connectionProperties: { secretName: 'warehouse', secretKey: 'password' },
  description: 'Warehouse login',
  secretsLocation: { type: 'AWS_SECRET_MANAGER', region: 'eu-west-1' },
};

const UpdateConnectionFields = {
  authType: Type.Enum(AUTH_TYPES, {
    description: 'CLOUD_PLATFORM_CREDENTIALS takes CLOUD_PROVIDER_SECRET; COMPONENT_BASIC every other',
  }),
  platformConnectionType: Type.Enum(PLATFORM_CONNECTION_TYPES),
  authProvider: Type.Optional(
    Type.String({ minLength: 1, maxLength: 255, default: 'NONE', description: 'NONE, aws, gcp, azure or a connector name' }),
  ),
  connectionDetails: Type.Optional(ConnectionDetails),
};

export const UpdateConnectionRequest = Type.Object(UpdateConnectionFields, {
  description: 'Replaces the whole connection: a field left out is unset.',
  examples: [{ authType: 'GENERIC_SECRET', platformConnectionType: 'COMPONENT_BASIC', connectionDetails: detailsExample }],
});
export type UpdateConnectionRequest = Static<typeof UpdateConnectionRequest>;

export const CreateConnectionRequest = Type.Object(
  { name: ConnectionName, ...UpdateConnectionFields },
  {
    examples: [
      {
        name: 'warehouse',
        authType: 'GENERIC_SECRET',
        platformConnectionType: 'COMPONENT_BASIC',
        connectionDetails: detailsExample,
      },
    ],
  },
);
export type CreateConnectionRequest = Static<typeof CreateConnectionRequest>;

export const ProjectConnection = Type.Object(
  {
    authProvider: Type.String(),
    authType: Type.Enum(AUTH_TYPES),
    connectionDetails: Type.Optional(ConnectionDetails),
    createdBy: Type.String({ description: 'the API client that created the connection' }),
    createdDate: Type.String({ format: 'date-time' }),
    name: Type.String(),
    platformConnectionType: Type.Enum(PLATFORM_CONNECTION_TYPES),
    projectId: Type.String({ format: 'uuid' }),
  },
  {
    examples: [
      {
        authProvider: 'NONE',
        authType: 'GENERIC_SECRET',
        connectionDetails: detailsExample,
        createdBy: '2f0c8a9e-77a4-4c1e-8d2b-5a1f9b7e3c21',
        createdDate: '2026-11-22T09:30:00.000Z',
        name: 'warehouse',
        platformConnectionType: 'COMPONENT_BASIC',
        projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
      },
    ],
  },
);
export type ProjectConnection = Static<typeof ProjectConnection>;

export const ConnectionNameQuery = Type.Object({ connectionName: ConnectionName });

/** Comma-separated connection names, as list filters take them. */
const ConnectionNames = Type.String({
  minLength: 1,
  description: 'comma-separated connection names',
  examples: ['warehouse,crm'],
});

export const ConnectionListQuery = Type.Object({
  ...PageQuery.properties,
  authProvider: Type.Optional(name()),
  connectionNames: Type.Optional(ConnectionNames),
});
export type ConnectionListQuery = Static<typeof ConnectionListQuery>;

const overrideExample = {
  connectionName: 'warehouse',
  environmentName: 'production',
  connectionDetails: {
    connectionProperties: { secretName: 'warehouse-prod' },
    secretsLocation: { type: 'DEFAULT_SECRET_VAULT' },
  },
};

export const CreateConnectionOverrideRequest = Type.Object(
  { connectionName: ConnectionName, environmentName: EnvironmentName, connectionDetails: ConnectionDetails },
  { examples: [overrideExample] },
);
export type CreateConnectionOverrideRequest = Static<typeof CreateConnectionOverrideRequest>;

export const UpdateConnectionOverrideRequest = Type.Object(
  { connectionDetails: ConnectionDetails },
  {
    description: 'Replaces the override: a field left out is unset.',
    examples: [
      {
        connectionDetails: {
          connectionProperties: { secretName: 'warehouse-prod-2' },
          secretsLocation: { type: 'DEFAULT_SECRET_VAULT' },
        },
      },
    ],
  },
);

export const ConnectionOverride = Type.Object(
  { connectionName: Type.String(), environmentName: Type.String(), connectionDetails: ConnectionDetails },
  { examples: [overrideExample] },
);
export type ConnectionOverride = Static<typeof ConnectionOverride>;

export const ConnectionOverrideKey = Type.Object({ environmentName: EnvironmentName, connectionName: ConnectionName });

export const ConnectionOverrideListQuery = Type.Object({
  ...PageQuery.properties,
  environmentName: Type.Optional(EnvironmentName),
  connectionNames: Type.Optional(ConnectionNames),
});
export type ConnectionOverrideListQuery = Static<typeof ConnectionOverrideListQuery>;
