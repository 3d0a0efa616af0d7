import { Type, type Static } from 'typebox';
import { NOT_RESERVED_OBJECT_NAME } from '../../core/reserved-names.ts';
import { SECRET_REFERENCE_TYPES } from '../secret-references/index.ts';

const SecretName = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[\\w./@+-]+$',
  ...NOT_RESERVED_OBJECT_NAME,
  description: 'vault secret name (not a name JavaScript objects reserve, such as constructor or __proto__)',
});

export const WriteSecretValueRequest = Type.Object(
  {
    secret: Type.Object({
      name: SecretName,
      key: Type.String({
        minLength: 1,
        maxLength: 255,
        ...NOT_RESERVED_OBJECT_NAME,
        description: 'key within the vault secret (not a name JavaScript objects reserve)',
      }),
      type: Type.Enum(SECRET_REFERENCE_TYPES),
      value: Type.Union(
        [
          Type.String({ minLength: 1, maxLength: 65_536 }),
          Type.Record(Type.String({ maxLength: 255 }), Type.String({ maxLength: 65_536 }), {
            minProperties: 1,
            maxProperties: 50,
            description: 'named members, e.g. clientId and clientSecret',
          }),
        ],
        { description: 'the secret value: encrypted for the agent, never stored or logged by the server' },
      ),
    }),
  },
  {
    examples: [
      { secret: { name: 'warehouse', key: 'login', type: 'PASSWORD', value: { clientId: 'loader', clientSecret: 's3cr3t' } } },
    ],
  },
);
export type WriteSecretValueRequest = Static<typeof WriteSecretValueRequest>;

export const WriteSecretValueQuery = Type.Object({
  overwrite: Type.Boolean({
    default: false,
    description: 'replace the value when the vault secret already has this key (otherwise that is 409 secret-exists)',
  }),
});

export const WriteSecretValueResponse = Type.Object(
  {
    resolver_ref: Type.String({ description: 'how pipelines refer to the written secret' }),
    vaultSecretName: Type.String(),
  },
  { examples: [{ resolver_ref: 'MATILLION_CUSTOMER_VAULT:warehouse:login', vaultSecretName: 'warehouse' }] },
);
