import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';
import { ProjectParams } from '../projects/schemas.ts';
import { SECRET_REFERENCE_TYPES } from '../secret-references/schemas.ts';

export const STREAMING_STATUSES = ['STOPPED', 'STARTING', 'RUNNING', 'STOPPING', 'FAILED'] as const;

const Text = Type.String({ minLength: 1, maxLength: 255 });

/** Where a password or key is kept in the customer's vault; a definition never holds the value itself. */
const StreamingSecretReference = Type.Object(
  {
    secretName: Text,
    secretType: Type.Enum(SECRET_REFERENCE_TYPES),
    secretKey: Type.Optional(Text),
    secretLocation: Type.Optional(
      Type.String({ minLength: 1, maxLength: 255, description: 'the vault, e.g. MATILLION_CUSTOMER_VAULT' }),
    ),
  },
  { additionalProperties: false },
);

const Properties = Type.Record(Type.String({ minLength: 1, maxLength: 255 }), Type.String({ maxLength: 4096 }), {
  maxProperties: 100,
});

const StreamingSource = Type.Object(
  {
    type: Type.String({ minLength: 1, maxLength: 64, examples: ['POSTGRES', 'MYSQL', 'SQLSERVER', 'ORACLE', 'DB2'] }),
    connection: Type.Object(
      {
        host: Type.String({ minLength: 1, maxLength: 255 }),
        port: Type.Integer({ minimum: 1, maximum: 65535 }),
        username: Text,
        password: StreamingSecretReference,
        jdbcProperties: Type.Optional(Properties),
      },
      { additionalProperties: false },
    ),
    tables: Type.Array(Type.Object({ schema: Text, table: Text }, { additionalProperties: false }), {
      minItems: 1,
      maxItems: 10_000,
    }),
  },
  { additionalProperties: false },
);

const StreamingTarget = Type.Object(
  {
    type: Type.String({ minLength: 1, maxLength: 64, examples: ['AZURE_BLOB', 'S3', 'GCS', 'SNOWFLAKE'] }),
    accountName: Type.Optional(Text),
    accountKey: Type.Optional(StreamingSecretReference),
    container: Type.Optional(Text),
    prefix: Type.Optional(Type.String({ maxLength: 1024 })),
    decimalMapping: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  },
  { additionalProperties: false },
);

export const StreamingPipelineRequest = Type.Object(
  {
    name: Text,
    agentId: Type.String({ format: 'uuid', description: 'the agent of the account that runs it' }),
    streamingSource: StreamingSource,
    streamingTarget: StreamingTarget,
    advancedProperties: Type.Optional(Properties),
  },
  {
    additionalProperties: false,
    examples: [
      {
        name: 'orders-cdc',
        agentId: '0b7d4c52-4f0e-4c8e-8a57-2f1f4bb0d3a9',
        streamingSource: {
          type: 'POSTGRES',
          connection: {
            host: 'db.internal',
            port: 5432,
            username: 'replicator',
            password: { secretName: 'orders-db', secretType: 'PASSWORD', secretKey: 'password' },
          },
          tables: [{ schema: 'public', table: 'orders' }],
        },
        streamingTarget: {
          type: 'AZURE_BLOB',
          accountName: 'lake',
          accountKey: { secretName: 'lake-key', secretType: 'PASSWORD' },
          container: 'cdc',
          prefix: 'orders/',
        },
      },
    ],
  },
);
export type StreamingPipelineRequest = Static<typeof StreamingPipelineRequest>;

export const StreamingPipeline = Type.Object({
  streamingPipelineId: Type.String({ format: 'uuid' }),
  projectId: Type.String({ format: 'uuid' }),
  ...StreamingPipelineRequest.properties,
  advancedProperties: Properties,
  status: Type.Enum(STREAMING_STATUSES),
  statusMessage: Type.Optional(Type.String()),
});
export type StreamingPipeline = Static<typeof StreamingPipeline>;

export const StreamingPipelineStatus = Type.Object(
  {
    streamingPipelineId: Type.String({ format: 'uuid' }),
    status: Type.Enum(STREAMING_STATUSES),
    statusMessage: Type.Optional(Type.String()),
  },
  {
    examples: [
      {
        streamingPipelineId: '2f0c3c1e-5a53-4f7a-9f5b-8d7f3c2d1e0a',
        status: 'RUNNING',
        statusMessage: 'source db.internal:5432 reachable',
      },
    ],
  },
);

export const StreamingPipelineParams = Type.Object({
  ...ProjectParams.properties,
  streamingPipelineId: Type.String({ format: 'uuid' }),
});
export type StreamingPipelineParams = Static<typeof StreamingPipelineParams>;

export const StreamingPipelineListQuery = PageQuery;
