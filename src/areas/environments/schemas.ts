import { Type, type Static } from 'typebox';
import { WAREHOUSE_TYPES } from '../../contract/sql-grammar.ts';

/** The specification's environmentName: 1 to 255 word characters, parentheses, spaces or dashes, not starting or ending with a dash. */
export const ENVIRONMENT_NAME_PATTERN = '^(?!-)[\\w() -]{1,255}(?<!-)$';

export const EnvironmentName = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: ENVIRONMENT_NAME_PATTERN,
  examples: ['production'],
});

const settingName = (description: string) => Type.String({ minLength: 1, maxLength: 255, description });

export const WarehouseSettings = Type.Object(
  {
    type: Type.Enum([...WAREHOUSE_TYPES], {
      description:
        "duckdb: the agent's embedded database (one file per account and environment); postgres: a PostgreSQL server. The others (snowflake, bigquery, redshift, mysql, mariadb, sqlserver) decide the grammar the pipeline review checks SQL with; the agent runs pipelines on duckdb and postgres only.",
    }),
    host: Type.Optional(settingName('postgres: the server')),
    port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
    database: Type.Optional(settingName('postgres: the database')),
    user: Type.Optional(settingName('postgres: the role')),
    connectionName: Type.Optional(
      settingName(
        "postgres: a project connection (COMPONENT_BASIC) whose secretName/secretKey name the password in the agent's vault",
      ),
    ),
    defaultDatabase: Type.Optional(settingName('what [Environment Default] means for a database')),
    defaultSchema: Type.Optional(settingName('what [Environment Default] means for a schema')),
  },
  {
    additionalProperties: false,
    description: "Where the environment's pipelines run. Never a password: that stays in the agent's vault.",
  },
);
export type WarehouseSettings = Static<typeof WarehouseSettings>;

export const CreateEnvironmentRequest = Type.Object(
  {
    name: EnvironmentName,
    description: Type.Optional(Type.String({ maxLength: 4000 })),
    defaultAgentId: Type.Optional(Type.String({ format: 'uuid' })),
    warehouse: Type.Optional(WarehouseSettings),
  },
  { examples: [{ name: 'production', description: 'Live data', defaultAgentId: '0d8f2f4e-3c55-4f0e-9d6e-6c4c2a1f7b10' }] },
);
export type CreateEnvironmentRequest = Static<typeof CreateEnvironmentRequest>;

export const Environment = Type.Object(
  {
    name: Type.String(),
    description: Type.Optional(Type.String()),
    defaultAgentId: Type.Optional(Type.String({ format: 'uuid' })),
    defaultAgentName: Type.Optional(Type.String({ description: 'the name of the default agent, beside its id' })),
    warehouse: Type.Optional(WarehouseSettings),
    createdAt: Type.String({ format: 'date-time' }),
  },
  {
    examples: [
      {
        name: 'production',
        description: 'Live data',
        defaultAgentId: '0d8f2f4e-3c55-4f0e-9d6e-6c4c2a1f7b10',
        defaultAgentName: 'eu-agent',
        createdAt: '2026-11-22T09:30:00.000Z',
      },
    ],
  },
);
export type Environment = Static<typeof Environment>;
