import { Type, type Static, type TSchema, type TUnion } from 'typebox';
import { PageQuery } from '../../core/paging.ts';
import { ProjectParams } from '../projects/index.ts';

export const STREAMING_PIPELINE_STATUSES = ['STOPPED', 'STARTING', 'RUNNING', 'STOPPING', 'FAILED'] as const;
export type StreamingPipelineStatus = (typeof STREAMING_PIPELINE_STATUSES)[number];

/** The fields a secret reference may have; anything else in its place (a value) is refused. */
export const SECRET_REFERENCE_FIELDS = ['secretName', 'secretType', 'secretKey', 'secretLocation', 'key'];

const Text = Type.String({ minLength: 1, maxLength: 255 });
/** A prefix may be empty: the vendor's provider sends `""` for none. */
const Prefix = Type.String({ maxLength: 1024 });
const Properties = Type.Record(Type.String({ minLength: 1, maxLength: 255 }), Type.String({ maxLength: 4000 }), {
  maxProperties: 100,
});

/** `values` as the vendor's provider writes them (lower case) and as the real service answers them (upper case). */
function eitherCase<const V extends string>(values: readonly V[], description: string) {
  return Type.Enum([...values, ...values.map((value) => value.toUpperCase() as Uppercase<V>)], {
    description: `${description}; either case, answered as written`,
  });
}

export const SecretReference = Type.Object(
  {
    secretName: Text,
    secretType: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 255,
        description:
          'the vendor form: aws_secrets_manager | azure_key_vault | google_secret_manager; the specification form: the secret type',
      }),
    ),
    key: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'the vendor form: the key in the secret' })),
    secretKey: Type.Optional(Text),
    secretLocation: Type.Optional(Text),
  },
  {
    description:
      "where the agent finds the secret: the vendor's {secretType, secretName, key} or the specification's {secretName, secretKey, secretType, secretLocation}; never the secret value itself",
  },
);

const Port = Type.Integer({ minimum: 1, maximum: 65535 });
const connectionFields = {
  host: Text,
  port: Port,
  username: Text,
  password: SecretReference,
  jdbcProperties: Type.Optional(Properties),
};
const Tables = Type.Array(Type.Object({ schema: Text, table: Text }), { minItems: 1, maxItems: 1000 });

/** A source database: MySQL and Db2 for IBM i name no database; PostgreSQL, SQL Server and Oracle do (Oracle a PDB too). */
function source<const T extends string, P extends Record<string, TSchema>>(type: T, extra: P) {
  return Type.Object({
    type: Type.Literal(type),
    connection: Type.Object({ ...connectionFields, ...extra }),
    tables: Tables,
  });
}

export const PostgresSource = source('postgres', { database: Text });
export const MysqlSource = source('mysql', {});
export const SqlServerSource = source('sqlserver', { database: Text });
export const OracleSource = source('oracle', { database: Text, pdb: Type.Optional(Text) });
export const Db2IbmISource = source('db2ibmi', {});

const DecimalMapping = eitherCase(['logical', 'legacy'], 'how decimals are written');

export const S3Target = Type.Object({
  type: Type.Literal('s3'),
  bucket: Text,
  prefix: Type.Optional(Prefix),
  decimalMapping: Type.Optional(DecimalMapping),
});

export const AbsTarget = Type.Object({
  type: Type.Literal('abs'),
  accountName: Text,
  accountKey: SecretReference,
  container: Text,
  prefix: Type.Optional(Prefix),
  decimalMapping: Type.Optional(DecimalMapping),
});

export const SnowflakeTarget = Type.Object({
  type: Type.Literal('snowflake'),
  connection: Type.Object({
    accountName: Text,
    username: Text,
    authentication: Type.Object({
      type: Type.Literal('key-pair'),
      privateKey: SecretReference,
      passphrase: Type.Optional(SecretReference),
    }),
    jdbcProperties: Type.Optional(Properties),
  }),
  role: Text,
  warehouse: Text,
  database: Text,
  stageSchema: Text,
  stageName: Text,
  stagePrefix: Type.Optional(Prefix),
  tableSchema: Text,
  tablePrefixType: eitherCase(['prefix', 'source_database_and_schema', 'none'], 'how target tables are named'),
  transformationType: eitherCase(['copy_table', 'copy_table_soft_delete', 'change_log'], 'how changes are applied'),
  temporalMapping: Type.Optional(eitherCase(['native', 'epoch'], 'how dates and times are written')),
});

/** One of `variants`, chosen by its `type` (OpenAPI and Ajv discriminator): a bad field is named in the chosen one. */
function byType<T extends TSchema[]>(variants: [...T], description: string) {
  return Type.Unsafe<Static<TUnion<T>>>({ oneOf: variants, discriminator: { propertyName: 'type' }, description });
}

export const StreamingSource = byType(
  [PostgresSource, MysqlSource, SqlServerSource, OracleSource, Db2IbmISource],
  'the source database, by type: postgres | mysql | sqlserver | oracle | db2ibmi',
);
export type StreamingSource = Static<typeof StreamingSource>;

export const StreamingTarget = byType(
  [S3Target, AbsTarget, SnowflakeTarget],
  'where the changes go, by type: s3 | abs | snowflake',
);
export type StreamingTarget = Static<typeof StreamingTarget>;

const requestExample = {
  name: 'orders-cdc',
  agentId: '0f3c1e0a-8a53-4b8e-9d53-7f3f7c5d0a11',
  advancedProperties: { 'snapshot.mode': 'initial' },
  streamingSource: {
    type: 'postgres',
    connection: {
      host: 'db.internal',
      port: 5432,
      database: 'orders',
      username: 'replicator',
      password: { secretType: 'aws_secrets_manager', secretName: 'orders-db', key: 'password' },
      jdbcProperties: { sslmode: 'require' },
    },
    tables: [{ schema: 'public', table: 'orders' }],
  },
  streamingTarget: {
    type: 'snowflake',
    connection: {
      accountName: 'acme-eu1',
      username: 'STREAMING',
      authentication: {
        type: 'key-pair',
        privateKey: { secretType: 'aws_secrets_manager', secretName: 'snowflake-key' },
      },
    },
    role: 'STREAMING_ROLE',
    warehouse: 'STREAMING_WH',
    database: 'RAW',
    stageSchema: 'STAGE',
    stageName: 'CDC_STAGE',
    tableSchema: 'ORDERS',
    tablePrefixType: 'none',
    transformationType: 'change_log',
    temporalMapping: 'native',
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
    description:
      'Passwords and account keys are secret references; a plain value in their place is 400, and so is a credential anywhere else in the definition (a property named like one, a URL with a password, a connection string with password=, a Bearer value).',
    examples: [requestExample],
  },
);
export type StreamingPipelineRequest = Static<typeof StreamingPipelineRequest>;

/** A definition stored in an older shape that its type's schema no longer fits: answered as stored. */
function AsStored(what: string) {
  return Type.Object(
    { type: Type.Unknown() },
    {
      additionalProperties: true,
      description: `the ${what} as stored, when it does not fit its type's schema (see definitionProblems)`,
    },
  );
}

export const StreamingPipeline = Type.Object(
  {
    streamingPipelineId: Type.String({ format: 'uuid' }),
    projectId: Type.String({ format: 'uuid' }),
    name: Type.String(),
    agentId: Type.String({ format: 'uuid' }),
    advancedProperties: Properties,
    streamingSource: Type.Union([StreamingSource, AsStored('source')]),
    streamingTarget: Type.Union([StreamingTarget, AsStored('target')]),
    status: Type.Enum(STREAMING_PIPELINE_STATUSES),
    definitionProblems: Type.Optional(
      Type.Array(Type.String(), {
        description:
          'present only for a definition stored in an older shape that does not fit its schemas: what does not, by field; write the pipeline again (PUT) to start it',
      }),
    ),
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
    phase: Type.Optional(
      Type.Enum(['snapshot', 'streaming'], {
        description: "what the run does: copying the tables' rows (snapshot) or reading the change stream",
      }),
    ),
    position: Type.Optional(
      Type.Union([Type.String(), Type.Null()], {
        description:
          'the last source position written to the target and committed by the agent (a PostgreSQL LSN such as 0/16B3748); null before any',
      }),
    ),
    lagSeconds: Type.Optional(
      Type.Number({
        minimum: 0,
        description: "seconds between the source's commit of the newest change written and its write; 0 when caught up",
      }),
    ),
    rowsPerTable: Type.Optional(
      Type.Record(Type.String(), Type.Integer({ minimum: 0 }), {
        description: "rows written to the target since the pipeline's first start, by schema.table (snapshot rows and changes)",
      }),
    ),
    reportedAt: Type.Optional(
      Type.String({ format: 'date-time', description: 'when the agent made the report the fields above come from' }),
    ),
  },
  {
    description:
      "The status, and from the agent's last progress report on the run (present once it made one): phase, position, lag and rows per table.",
    examples: [
      {
        streamingPipelineId: '7d1c6b8e-2f4a-4c3e-9b5d-1a2b3c4d5e6f',
        status: 'RUNNING',
        changedAt: '2026-01-01T00:00:00.000Z',
        phase: 'streaming',
        position: '0/16B3748',
        lagSeconds: 0.4,
        rowsPerTable: { 'public.orders': 1200 },
        reportedAt: '2026-01-01T00:05:00.000Z',
      },
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

export const DeleteQuery = Type.Object({
  dropSlot: Type.Boolean({
    default: false,
    description:
      "also drop the pipeline's replication slot and publication at the source, through its agent (asynchronous: the agent does it when it next takes work; the slot is named dpc_ and the pipeline id without dashes). Without it the slot and publication stay at the source, and the slot keeps the source's WAL until it is dropped by hand",
  }),
});

export const StreamingPipelineCommand = Type.Object(
  {
    command: Type.Enum(['START', 'STOP'], { description: 'START: as POST .../start; STOP: as POST .../stop' }),
  },
  { examples: [{ command: 'START' }] },
);
export type StreamingPipelineCommand = Static<typeof StreamingPipelineCommand>;
