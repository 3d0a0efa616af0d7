import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';
import { ProjectParams } from '../projects/index.ts';

export const SECRET_REFERENCE_TYPES = [
  'PASSWORD',
  'OAUTH_USER_TOKENS',
  'OAUTH_AUTHORIZATION_CODE',
  'OAUTH_CLIENT_CRED',
  'OAUTH_CLIENT_CREDENTIALS',
  'COMPOSITE_TOKEN',
  'CLOUD_PLATFORM_CREDENTIALS',
] as const;
const SecretReferenceType = Type.Enum(SECRET_REFERENCE_TYPES);

export const SecretReferenceParams = Type.Object({
  ...ProjectParams.properties,
  secretReferenceName: Type.String({ pattern: '^[\\w()-]{1,128}$', examples: ['warehouse-password'] }),
});
export type SecretReferenceParams = Static<typeof SecretReferenceParams>;

const Text = Type.String({ minLength: 1, maxLength: 255 });

export const CreateSecretReferenceRequest = Type.Object(
  {
    type: SecretReferenceType,
    secretName: Type.String({ minLength: 1, maxLength: 255, description: 'name of the vault secret' }),
    secretKey: Type.Optional(Type.String({ maxLength: 255, description: 'key within the vault secret' })),
    description: Type.Optional(Type.String({ maxLength: 4000 })),
    vaultName: Type.Optional(Text),
    vaultType: Type.Optional(Text),
    provider: Type.Optional(Text),
  },
  {
    description: 'A reference to a secret held in a vault; the secret value itself is never sent here.',
    examples: [
      {
        type: 'PASSWORD',
        secretName: 'warehouse',
        secretKey: 'password',
        description: 'Warehouse login',
        vaultType: 'AWS_SECRET_MANAGER',
      },
    ],
  },
);
export type CreateSecretReferenceRequest = Static<typeof CreateSecretReferenceRequest>;

export const SecretReference = Type.Object(
  {
    name: Type.String({ description: 'name of the reference in the platform' }),
    type: SecretReferenceType,
    secretName: Type.String(),
    secretKey: Type.Optional(Type.String()),
    description: Type.Optional(Type.String()),
    vaultName: Type.Optional(Type.String()),
    vaultType: Type.Optional(Type.String()),
    provider: Type.Optional(Type.String()),
  },
  {
    examples: [
      {
        name: 'warehouse-password',
        type: 'PASSWORD',
        secretName: 'warehouse',
        secretKey: 'password',
        description: 'Warehouse login',
        vaultType: 'AWS_SECRET_MANAGER',
      },
    ],
  },
);
export type SecretReference = Static<typeof SecretReference>;

export const SecretReferenceQuery = Type.Object({
  ...PageQuery.properties,
  type: Type.Enum(SECRET_REFERENCE_TYPES, { default: 'PASSWORD', description: 'only references of this type' }),
  provider: Type.Optional(
    Type.String({ minLength: 1, maxLength: 255, description: 'only references of this provider; ignored for PASSWORD' }),
  ),
});
export type SecretReferenceQuery = Static<typeof SecretReferenceQuery>;
