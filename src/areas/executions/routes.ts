import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page, pageOf, PageQuery } from '../../core/paging.ts';
import { problems } from '../../core/openapi.ts';
import { ProjectParams, requireProject, writeInProject } from '../projects/index.ts';
import {
  CancelPipelineExecutionResponse,
  CancelRequest,
  CancelTestExecutionResponse,
  ExecutionList,
  ExecutionStatusResponse,
  ExecutionStep,
  ListExecutionsQuery,
  PipelineExecutionDetails,
  PipelineExecutionParams,
  StartPipelineExecutionRequest,
  StartPipelineExecutionResponse,
  StartTestExecutionRequest,
  StartTestExecutionResponse,
  TestExecutionDetails,
  TestExecutionParams,
} from './schemas.ts';
import {
  AGENT_WORK_KINDS,
  createExecution,
  listExecutions,
  listSteps,
  requireExecution,
  triggerOf,
  type ExecutionKind,
  type ExecutionRow,
} from './service.ts';
import { preparePipelineRun, prepareTestRun } from './run-start.ts';
import {
  applyAgentReport,
  cancelExecution,
  cancelWorkOfDeletedProject,
  endRunsOfDeletedAgent,
  sweepExecutions,
} from './lifecycle.ts';
import type { ExecutionStatus } from './states.ts';
import { runPeriodically } from '../../core/ticker.ts';

const tags = ['Pipeline Executions'];
const testTags = ['Test Executions'];

function detailsOf(row: ExecutionRow) {
  return {
    projectId: row.projectId,
    environmentName: row.environmentName,
    versionName: row.versionName,
    agentId: row.agentId,
    status: row.status as ExecutionStatus,
    message: row.message,
    trigger: triggerOf(row.trigger),
    scheduleId: row.scheduleId,
    startedAt: row.startedAt,
    finishedAt: row.finishedAt,
  };
}

export async function executionRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  for (const kind of Object.values(AGENT_WORK_KINDS)) app.agentWorkReports.on(kind, applyAgentReport);
  // Deleting an agent ends the runs it had not finished; deleting a project cancels its runs' work on the agents.
  app.agentDeletion.alsoEnd(endRunsOfDeletedAgent);
  app.projectDeletion.inTransaction('executions', (trx, _dialect, _accountId, projectId) =>
    cancelWorkOfDeletedProject(trx, projectId),
  );
  // Runs whose agent is out of contact move to UNKNOWN, then FAILED.
  runPeriodically(app, 'execution sweep', app.config.schedulerIntervalMs, () =>
    sweepExecutions(app.store.db, app.config.executionLostAfterMs),
  );

  /** The run `id` of the caller's project, for reads. */
  const readRun = async (accountId: string, projectId: string, id: string, kind: ExecutionKind) => {
    await requireProject(app.store.db, accountId, projectId);
    return requireExecution(app.store.db, accountId, projectId, id, kind);
  };

  app.post(
    '/projects/:projectId/pipeline-executions',
    {
      schema: {
        summary: 'Start a pipeline execution, run by an agent',
        description:
          "The pipeline is read from the environment's artifact (versionName, else the latest enabled version) and handed to the named agent or the environment's default agent. Variables resolve request > environment override > project default.",
        tags,
        params: ProjectParams,
        body: StartPipelineExecutionRequest,
        response: { 201: StartPipelineExecutionResponse, ...problems(409, 410, 422) },
      },
    },
    async (request, reply) => {
      const { accountId } = request.principal;
      const { projectId } = request.params;
      await requireProject(app.store.db, accountId, projectId);
      const run = await preparePipelineRun(app.store.db, {
        ...request.body,
        accountId,
        projectId,
        trigger: 'API',
        hostedAgent: app.config.hostedAgent,
      });
      const pipelineExecutionId = await writeInProject(app.store.db, accountId, projectId, async (trx) => {
        const id = await createExecution(trx, 'PIPELINE', run, {
          pipelineName: run.pipelineName,
          executionTag: request.body.executionTag,
        });
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.pipelineExecutionId = id;
        return id;
      });
      // The platform-hosted agent runs in this instance from now on (the sweep of every instance starts it too).
      if (run.hosted) await app.hostedAgents.ensure(accountId, run.agentId);
      request.auditIds.pipelineExecutionId = pipelineExecutionId;
      return sendCreated(request, reply, { segment: pipelineExecutionId }, { pipelineExecutionId });
    },
  );

  app.get(
    '/projects/:projectId/pipeline-executions/:pipelineExecutionId/status',
    {
      schema: {
        summary: 'The status of a pipeline execution',
        tags,
        params: PipelineExecutionParams,
        response: { 200: ExecutionStatusResponse },
      },
    },
    async (request) => {
      const { projectId, pipelineExecutionId } = request.params;
      const run = await readRun(request.principal.accountId, projectId, pipelineExecutionId, 'PIPELINE');
      return { status: run.status as ExecutionStatus };
    },
  );

  app.get(
    '/projects/:projectId/pipeline-executions/:pipelineExecutionId',
    {
      schema: {
        summary: 'A pipeline execution: pipeline, environment, agent, trigger, times and message',
        tags,
        params: PipelineExecutionParams,
        response: { 200: PipelineExecutionDetails },
      },
    },
    async (request) => {
      const { projectId, pipelineExecutionId } = request.params;
      const run = await readRun(request.principal.accountId, projectId, pipelineExecutionId, 'PIPELINE');
      return {
        pipelineExecutionId: run.id,
        pipelineName: run.pipelineName ?? '',
        pipelineType: 'ORCHESTRATION' as const,
        executionTag: run.executionTag,
        ...detailsOf(run),
      };
    },
  );

  app.get(
    '/projects/:projectId/pipeline-executions/:pipelineExecutionId/steps',
    {
      schema: {
        summary: 'The steps of a pipeline execution, in the order they ran',
        tags,
        params: PipelineExecutionParams,
        querystring: PageQuery,
        response: { 200: Page(ExecutionStep) },
      },
    },
    async (request) => {
      const { projectId, pipelineExecutionId } = request.params;
      const run = await readRun(request.principal.accountId, projectId, pipelineExecutionId, 'PIPELINE');
      const { results, total } = await listSteps(app.store.db, run.id, request.query);
      return pageOf(request.query, results, total);
    },
  );

  app.patch(
    '/projects/:projectId/pipeline-executions/:pipelineExecutionId',
    {
      // A cancel with If-Match moves the run only at the version its check saw (core/conditional.ts).
      config: { rowVersion: { table: 'executions', idParam: 'pipelineExecutionId' } },
      schema: {
        summary: 'Cancel a pipeline execution',
        description:
          'CANCELLING until the agent stops the run, then CANCELLED; with forceUpdate CANCELLED at once (a later report of the agent cannot revive it). A finished run is 409.',
        tags,
        params: PipelineExecutionParams,
        body: CancelRequest,
        response: { 200: CancelPipelineExecutionResponse, ...problems(409) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { projectId, pipelineExecutionId } = request.params;
      const moved = await writeInProject(app.store.db, accountId, projectId, async (trx) =>
        cancelExecution(
          trx,
          await requireExecution(trx, accountId, projectId, pipelineExecutionId, 'PIPELINE'),
          request.body.forceUpdate ?? false,
        ),
      );
      return { pipelineExecutionId, status: moved.status as ExecutionStatus };
    },
  );

  app.get(
    '/pipeline-executions',
    {
      schema: {
        summary: "The account's pipeline executions, newest first, token paged",
        description: 'Loop while `more` is not null, sending it back as `paginationToken`.',
        tags,
        querystring: ListExecutionsQuery,
        response: { 200: ExecutionList },
      },
    },
    async (request) => listExecutions(app.store.db, request.principal.accountId, request.query),
  );

  app.post(
    '/projects/:projectId/test-executions',
    {
      schema: {
        summary: 'Start a test execution, run by an agent',
        description:
          'Test pipelines are orchestration pipelines whose file ends in `.test.orch.yaml`. TEST runs testName; PIPELINE the tests beside pipelineName whose file name starts with its name; PROJECT every test of the version.',
        tags: testTags,
        params: ProjectParams,
        body: StartTestExecutionRequest,
        response: { 201: StartTestExecutionResponse, ...problems(410, 422) },
      },
    },
    async (request, reply) => {
      const { accountId } = request.principal;
      const { projectId } = request.params;
      await requireProject(app.store.db, accountId, projectId);
      const run = await prepareTestRun(app.store.db, {
        ...request.body,
        accountId,
        projectId,
        trigger: 'API',
        hostedAgent: app.config.hostedAgent,
      });
      const testExecutionId = await writeInProject(app.store.db, accountId, projectId, async (trx) => {
        const id = await createExecution(trx, 'TEST', run, {
          pipelineName: run.pipelineName,
          testScope: request.body.scope,
          testName: run.testName,
          tests: run.tests,
        });
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.testExecutionId = id;
        return id;
      });
      if (run.hosted) await app.hostedAgents.ensure(accountId, run.agentId);
      request.auditIds.testExecutionId = testExecutionId;
      return sendCreated(request, reply, { segment: testExecutionId }, { testExecutionId });
    },
  );

  app.get(
    '/projects/:projectId/test-executions/:testExecutionId',
    {
      schema: {
        summary: 'A test execution and its status',
        tags: testTags,
        params: TestExecutionParams,
        response: { 200: TestExecutionDetails },
      },
    },
    async (request) => {
      const { projectId, testExecutionId } = request.params;
      const run = await readRun(request.principal.accountId, projectId, testExecutionId, 'TEST');
      return {
        testExecutionId: run.id,
        scope: run.testScope as 'TEST' | 'PIPELINE' | 'PROJECT',
        pipelineName: run.pipelineName,
        testName: run.testName,
        ...detailsOf(run),
      };
    },
  );

  app.get(
    '/projects/:projectId/test-executions/:testExecutionId/steps',
    {
      schema: {
        summary: 'The results of a test execution: every step of every test pipeline (childPipeline names it)',
        tags: testTags,
        params: TestExecutionParams,
        querystring: PageQuery,
        response: { 200: Page(ExecutionStep) },
      },
    },
    async (request) => {
      const { projectId, testExecutionId } = request.params;
      const run = await readRun(request.principal.accountId, projectId, testExecutionId, 'TEST');
      const { results, total } = await listSteps(app.store.db, run.id, request.query);
      return pageOf(request.query, results, total);
    },
  );

  app.patch(
    '/projects/:projectId/test-executions/:testExecutionId',
    {
      config: { rowVersion: { table: 'executions', idParam: 'testExecutionId' } },
      schema: {
        summary: 'Cancel a test execution, optionally forcing termination',
        description:
          'status must be CANCELLED (any other is 400). Same rules as a pipeline execution cancel; a finished run is 409.',
        tags: testTags,
        params: TestExecutionParams,
        body: CancelRequest,
        response: { 200: CancelTestExecutionResponse, ...problems(409) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { projectId, testExecutionId } = request.params;
      await writeInProject(app.store.db, accountId, projectId, async (trx) =>
        cancelExecution(
          trx,
          await requireExecution(trx, accountId, projectId, testExecutionId, 'TEST'),
          request.body.forceUpdate ?? false,
        ),
      );
      return { testExecutionId };
    },
  );
}
