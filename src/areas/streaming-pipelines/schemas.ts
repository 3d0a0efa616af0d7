import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';
import { ProjectParams } from '../projects/index.ts';

export const STREAMING_PIPELINE_STATUSES = ['STOPPED', 'STARTING', 'RUNNING', 'STOPPING', 'FAILED'] as const;
export type StreamingPipelineStatus = (typeof STREAMING_PIPELINE_STATUSES)[number];

/** The fields a secret reference may have; anything else in its place (a value) is refused. */
export const SECRET_REFERENCE_FIELDS = ['secretName', 'secretType', 'secretKey', 'secretLocation'];

const Text = Type.String({ minLength: 1, maxLength: 255 });
const Properties = Type.Record(Type.String({ minLength: 1, maxLength: 255 }), Type.String({ maxLength: 4000 }), {
  maxProperties: 100,
});

const SecretReference = Type.Object(
  {
    secretName: Text,
    secretType: Type.Optional(Text),
    secretKey: Type.Optional(Text),
    secretLocation: Type.Optional(Text),
  },
  { description: 'where the agent finds the secret in its vault; never the secret value itself' },
);

const StreamingSource = Type.Object({
  type: Text,
  connection: Type.Object({
    host: Text,
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
    username: Text,
    password: SecretReference,
    jdbcProperties: Type.Optional(Properties),
  }),
  tables: Type.Array(Type.Object({ schema: Text, table: Text }), { minItems: 1, maxItems: 1000 }),
});

const StreamingTarget = Type.Object({
  type: Text,
  accountName: Type.Optional(Text),
  accountKey: Type.Optional(SecretReference),
  container: Type.Optional(Text),
  prefix: Type.Optional(Type.String({ maxLength: 1024 })),
  decimalMapping: Type.Optional(Text),
});

const requestExample = {
  name: 'orders-cdc',
  agentId: '0f3c1e0a-8a53-4b8e-9d53-7f3f7c5d0a11',
  advancedProperties: { 'snapshot.mode': 'initial' },
  streamingSource: {
    type: 'POSTGRES',
    connection: {
      host: 'db.internal',
      port: 5432,
      username: 'replicator',
      password: {
        secretName: 'orders-db',
        secretKey: 'password',
        secretType: 'PASSWORD',
        secretLocation: 'MATILLION_CUSTOMER_VAULT',
      },
      jdbcProperties: { sslmode: 'require' },
    },
    tables: [{ schema: 'public', table: 'orders' }],
  },
  streamingTarget: {
    type: 'AZURE_BLOB',
    accountName: 'lake',
    accountKey: { secretName: 'lake-key', secretKey: 'key', secretLocation: 'MATILLION_CUSTOMER_VAULT' },
    container: 'cdc',
    prefix: 'orders/',
    decimalMapping: 'STRING',
  },
};

export const StreamingPipelineRequest = Type.Object(
  {
    name: Text,
    agentId: Type.String({ format: 'uuid', description: "one of the account's agents; it runs the pipeline" }),
    advancedProperties: Type.Optional(Properties),
    streamingSource: StreamingSource,
    streamingTarget: StreamingTarget,
  },
  {
    description: 'Passwords and account keys are secret references; a plain value in their place is 400.',
    examples: [requestExample],
  },
);
export type StreamingPipelineRequest = Static<typeof StreamingPipelineRequest>;

export const StreamingPipeline = Type.Object(
  {
    streamingPipelineId: Type.String({ format: 'uuid' }),
    projectId: Type.String({ format: 'uuid' }),
    name: Type.String(),
    agentId: Type.String({ format: 'uuid' }),
    advancedProperties: Properties,
    streamingSource: StreamingSource,
    streamingTarget: StreamingTarget,
    status: Type.Enum(STREAMING_PIPELINE_STATUSES),
  },
  {
    examples: [
      {
        ...requestExample,
        streamingPipelineId: '7d1c6b8e-2f4a-4c3e-9b5d-1a2b3c4d5e6f',
        projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
        status: 'STOPPED',
      },
    ],
  },
);
export type StreamingPipeline = Static<typeof StreamingPipeline>;

export const StreamingPipelineStatusAnswer = Type.Object(
  {
    streamingPipelineId: Type.String({ format: 'uuid' }),
    status: Type.Enum(STREAMING_PIPELINE_STATUSES, {
      description: 'STOPPED -> STARTING (start) -> RUNNING or FAILED (the agent reports); RUNNING -> STOPPING (stop) -> STOPPED',
    }),
    message: Type.Optional(Type.String({ description: 'why it failed, as the agent reported' })),
    changedAt: Type.String({ format: 'date-time' }),
  },
  {
    examples: [
      { streamingPipelineId: '7d1c6b8e-2f4a-4c3e-9b5d-1a2b3c4d5e6f', status: 'RUNNING', changedAt: '2026-01-01T00:00:00.000Z' },
    ],
  },
);

export const StreamingPipelineParams = Type.Object({
  ...ProjectParams.properties,
  streamingPipelineId: Type.String({ format: 'uuid' }),
});
export type StreamingPipelineParams = Static<typeof StreamingPipelineParams>;

export const StreamingPipelineQuery = Type.Object({
  ...PageQuery.properties,
  agentId: Type.Optional(Type.String({ format: 'uuid', description: 'only the pipelines of this agent' })),
  status: Type.Optional(Type.Enum(STREAMING_PIPELINE_STATUSES, { description: 'only pipelines in this status' })),
});
export type StreamingPipelineQuery = Static<typeof StreamingPipelineQuery>;

export const StopQuery = Type.Object({
  force: Type.Boolean({
    default: false,
    description:
      'stop at once, from STARTING, RUNNING or STOPPING, without waiting for the agent (use when the agent is gone): its outstanding start/stop work is cancelled and the pipeline is STOPPED',
  }),
});
