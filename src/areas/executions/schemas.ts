import { Type, type Static } from 'typebox';
import { ProjectId, ProjectParams } from '../projects/index.ts';
import { EnvironmentName } from '../environments/index.ts';
import { EXECUTION_STATUSES } from './states.ts';

const ExecutionId = Type.String({ format: 'uuid' });
export const ExecutionStatusSchema = Type.Enum(EXECUTION_STATUSES);
/** The vendor's trigger values: a run started through this API is API, one a schedule starts SCHEDULE. */
export const TRIGGERS = ['DESIGNER', 'API', 'SCHEDULE', 'SCHEDULE_RUN_NOW', 'UNKNOWN'] as const;
export type Trigger = (typeof TRIGGERS)[number];
const Trigger = Type.Enum(TRIGGERS, {
  description: 'what started the run: API (through this API), SCHEDULE (a schedule), or DESIGNER, SCHEDULE_RUN_NOW, UNKNOWN',
});
const DateTime = Type.String({ format: 'date-time' });

/** A pipeline named by its path in the artifact, with or without the `.orch.yaml` ending. */
export const PipelineName = Type.String({ minLength: 1, maxLength: 1024, examples: ['pipelines/daily-load.orch.yaml'] });

export const PipelineExecutionParams = Type.Object({ ...ProjectParams.properties, pipelineExecutionId: ExecutionId });
export const TestExecutionParams = Type.Object({ ...ProjectParams.properties, testExecutionId: ExecutionId });

/** Names are checked against the variables that exist (a violation each), not by pattern. */
const VariableKey = Type.String();
const ScalarValue = Type.Union([Type.String({ maxLength: 65535 }), Type.Number()]);

export const StartPipelineExecutionRequest = Type.Object(
  {
    pipelineName: PipelineName,
    environmentName: EnvironmentName,
    agentId: Type.Optional(
      Type.String({ format: 'uuid', description: "the agent to run it; the environment's default agent when left out" }),
    ),
    executionTag: Type.Optional(
      Type.String({ minLength: 1, maxLength: 255, description: 'at most one running execution of the project has a given tag' }),
    ),
    scalarVariables: Type.Optional(
      Type.Record(VariableKey, ScalarValue, {
        maxProperties: 1000,
        description: 'values of project variables (or of TEXT/NUMBER variables the pipeline declares), by name',
      }),
    ),
    gridVariables: Type.Optional(
      Type.Record(VariableKey, Type.Array(Type.Array(ScalarValue), { maxItems: 10000 }), {
        maxProperties: 100,
        description: 'rows of GRID variables the pipeline declares, by name',
      }),
    ),
    versionName: Type.Optional(
      Type.String({ minLength: 1, maxLength: 255, description: 'the artifact version; the latest enabled one when left out' }),
    ),
  },
  {
    examples: [
      {
        pipelineName: 'pipelines/daily-load.orch.yaml',
        environmentName: 'production',
        executionTag: 'nightly',
        scalarVariables: { region_code: 'eu-west-1' },
      },
    ],
  },
);
export type StartPipelineExecutionRequest = Static<typeof StartPipelineExecutionRequest>;

export const StartPipelineExecutionResponse = Type.Object({ pipelineExecutionId: ExecutionId });

export const TEST_SCOPES = ['TEST', 'PIPELINE', 'PROJECT'] as const;
export const StartTestExecutionRequest = Type.Object(
  {
    scope: Type.Enum(TEST_SCOPES, {
      description: 'TEST: the test pipeline testName; PIPELINE: the tests of pipelineName; PROJECT: every test pipeline',
    }),
    environmentName: EnvironmentName,
    pipelineName: Type.Optional(PipelineName),
    testName: Type.Optional(PipelineName),
    agentId: Type.Optional(Type.String({ format: 'uuid' })),
    versionName: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
  },
  { examples: [{ scope: 'PIPELINE', environmentName: 'test', pipelineName: 'pipelines/daily-load.orch.yaml' }] },
);
export type StartTestExecutionRequest = Static<typeof StartTestExecutionRequest>;

export const StartTestExecutionResponse = Type.Object({ testExecutionId: ExecutionId });

export const CancelRequest = Type.Object(
  {
    forceUpdate: Type.Optional(
      Type.Boolean({ default: false, description: 'true: CANCELLED at once, whether or not the agent answers' }),
    ),
    status: Type.Literal('CANCELLED', { description: 'the only status a client may set' }),
  },
  { examples: [{ forceUpdate: false, status: 'CANCELLED' }] },
);
export type CancelRequest = Static<typeof CancelRequest>;

export const CancelPipelineExecutionResponse = Type.Object({ pipelineExecutionId: ExecutionId, status: ExecutionStatusSchema });
export const CancelTestExecutionResponse = Type.Object({ testExecutionId: ExecutionId });

export const ExecutionStatusResponse = Type.Object({ status: ExecutionStatusSchema }, { examples: [{ status: 'RUNNING' }] });

const common = {
  projectId: Type.String(),
  environmentName: Type.String(),
  versionName: Type.String(),
  agentId: Type.String(),
  status: ExecutionStatusSchema,
  message: Type.Union([Type.String(), Type.Null()]),
  trigger: Trigger,
  scheduleId: Type.Union([Type.String(), Type.Null()]),
  startedAt: DateTime,
  finishedAt: Type.Union([DateTime, Type.Null()]),
};

export const PipelineExecutionDetails = Type.Object({
  pipelineExecutionId: ExecutionId,
  pipelineName: Type.String(),
  pipelineType: Type.Literal('ORCHESTRATION'),
  executionTag: Type.Union([Type.String(), Type.Null()]),
  ...common,
});

export const TestExecutionDetails = Type.Object({
  testExecutionId: ExecutionId,
  scope: Type.Enum(TEST_SCOPES),
  pipelineName: Type.Union([Type.String(), Type.Null()]),
  testName: Type.Union([Type.String(), Type.Null()]),
  ...common,
});

/** An item of the account-wide list (INTERFACE.md). */
export const PipelineExecutionSummary = Type.Object({
  pipelineExecutionId: ExecutionId,
  pipelineName: Type.String(),
  status: ExecutionStatusSchema,
  startedAt: DateTime,
  finishedAt: Type.Union([DateTime, Type.Null()]),
  environmentName: Type.String(),
  projectId: Type.String(),
  pipelineType: Type.Literal('ORCHESTRATION'),
  trigger: Trigger,
  scheduleId: Type.Union([Type.String(), Type.Null()]),
  message: Type.Union([Type.String(), Type.Null()]),
});
export type PipelineExecutionSummary = Static<typeof PipelineExecutionSummary>;

export const ListExecutionsQuery = Type.Object({
  projectId: Type.Optional(ProjectId),
  pipelineName: Type.Optional(PipelineName),
  environmentName: Type.Optional(EnvironmentName),
  status: Type.Optional(ExecutionStatusSchema),
  startedAfter: Type.Optional(Type.String({ format: 'date-time', description: 'runs started at or after this time' })),
  startedBefore: Type.Optional(Type.String({ format: 'date-time', description: 'runs started before this time' })),
  scheduleId: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'only the runs this schedule started' })),
  limit: Type.Integer({ minimum: 1, maximum: 1000, default: 25 }),
  paginationToken: Type.Optional(Type.String({ maxLength: 512, description: 'the `more` of the previous page' })),
});
export type ListExecutionsQuery = Static<typeof ListExecutionsQuery>;

export const ExecutionList = Type.Object({
  results: Type.Array(PipelineExecutionSummary),
  more: Type.Union([Type.String(), Type.Null()], { description: 'token of the next page, null on the last' }),
});

export const ExecutionStep = Type.Object({
  id: Type.String(),
  name: Type.String(),
  result: Type.Object({
    status: Type.String({ description: 'RUNNING, SUCCESS, FAILED, SKIPPED or CANCELLED' }),
    startedAt: DateTime,
    finishedAt: Type.Union([DateTime, Type.Null()]),
    message: Type.Union([Type.String(), Type.Null()]),
    rowsWritten: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
      description:
        "rows the step's SQL wrote (inserted, updated, deleted, or created by CREATE TABLE AS), as the agent's warehouse told it; null where not known (a step that runs no SQL, a warehouse that does not tell)",
    }),
  }),
  childPipeline: Type.Union(
    [
      Type.Object(
        { name: Type.String({ description: 'the path of the child pipeline in the artifact' }) },
        { description: 'the child pipeline this step ran' },
      ),
      Type.Null(),
    ],
    { description: 'the child pipeline run by this step (an object), or null; never a string' },
  ),
});
export type ExecutionStep = Static<typeof ExecutionStep>;
