import path from 'node:path';
import { Type, type Static, type TSchema } from 'typebox';
import { Value } from 'typebox/value';
import type { Config } from '../../core/config.ts';
import type { Db } from '../../core/db/database.ts';
import { ProblemError } from '../../core/problems.ts';
import { listPublishedPipelines } from '../artifacts/index.ts';
import { listEnvironments, requireEnvironmentId } from '../environments/index.ts';
import { listVariables } from '../variables/index.ts';
import {
  createExecution,
  type ExecutionStatus,
  isFinal,
  listSteps,
  preparePipelineRun,
  requireExecution,
  toSummary,
} from '../executions/index.ts';
import { assertNoMigrationInProgress, externalRepositoryOf, hostedRepositoryPath } from '../repositories/index.ts';
import { branchHead, commitFiles, GitError, listFiles, readFile } from './git.ts';
import type { AiTaskTable } from './tables.ts';
import type { ToolName } from './tool-names.ts';

/** A tool could not do what it was asked; the message goes back to the model, which may try otherwise. */
export class ToolError extends Error {}

export interface ToolContext {
  db: Db;
  config: Config;
  task: AiTaskTable;
}

export type ToolAccess = 'READ' | 'WRITE';

export interface Tool<S extends TSchema = TSchema> {
  name: ToolName;
  /** READ tools look; WRITE tools change the project. PLAN tasks are offered READ tools only. */
  access: ToolAccess;
  description: string;
  parameters: S;
  run(context: ToolContext, input: Static<S>): Promise<unknown>;
}

const MAX_LISTED_FILES = 2000;
const MAX_READ_BYTES = 256 * 1024;
const MAX_WRITTEN_FILES = 100;
const MAX_WRITTEN_BYTES = 1024 * 1024;
const LIST_SIZE = 100;
/** Longest wait of run_pipeline for the run to finish; past it the model follows it with get_pipeline_execution. */
const MAX_RUN_WAIT_SECONDS = 120;

/**
 * `relative` inside the task's working directory, as a repository path. Absolute paths, `..` that leaves
 * the working directory and anything inside `.git` are refused.
 */
export function pathInWorkingDirectory(workingDirectory: string, relative: string): string {
  const joined = path.posix.normalize(path.posix.join(workingDirectory || '.', relative || '.'));
  const inside = joined === '.' ? '' : joined.replace(/\/+$/, '');
  const outside =
    path.posix.isAbsolute(relative) ||
    inside.startsWith('../') ||
    inside === '..' ||
    (workingDirectory !== '' && inside !== workingDirectory && !inside.startsWith(`${workingDirectory}/`));
  if (outside) throw new ToolError(`"${relative}" is outside the working directory "${workingDirectory || '/'}".`);
  if (inside.split('/').some((segment) => segment.toLowerCase() === '.git'))
    throw new ToolError('Paths inside .git are not allowed.');
  return inside;
}

function repositoryOf(context: ToolContext): string {
  return hostedRepositoryPath(context.config, context.task.projectId);
}

async function sourceHead(context: ToolContext): Promise<string> {
  const head = await branchHead(repositoryOf(context), context.task.sourceBranchName);
  if (!head) throw new ToolError(`The source branch "${context.task.sourceBranchName}" no longer exists.`);
  return head;
}

const Page = Type.Optional(
  Type.Integer({ minimum: 0, default: 0, description: `page number, from 0 (${LIST_SIZE} items a page)` }),
);

function tool<S extends TSchema>(definition: Tool<S>): Tool {
  return definition as unknown as Tool;
}

export const TOOLS: Tool[] = [
  tool({
    name: 'list_files',
    access: 'READ',
    description: 'Lists the files under a folder of the working directory, at the source branch (paths relative to that folder).',
    parameters: Type.Object(
      { folder: Type.Optional(Type.String({ description: 'folder inside the working directory; its root when omitted' })) },
      { additionalProperties: false },
    ),
    async run(context, { folder = '' }) {
      const at = pathInWorkingDirectory(context.task.workingDirectory, folder);
      const files = await listFiles(repositoryOf(context), await sourceHead(context), at);
      return {
        branch: context.task.sourceBranchName,
        folder: at || '/',
        files: files.slice(0, MAX_LISTED_FILES),
        ...(files.length > MAX_LISTED_FILES && { truncated: true, total: files.length }),
      };
    },
  }),
  tool({
    name: 'read_file',
    access: 'READ',
    description: `Reads a text file of the working directory at the source branch (the first ${MAX_READ_BYTES / 1024} KiB).`,
    parameters: Type.Object(
      { path: Type.String({ minLength: 1, description: 'file path inside the working directory' }) },
      { additionalProperties: false },
    ),
    async run(context, input) {
      const at = pathInWorkingDirectory(context.task.workingDirectory, input.path);
      const file = await readFile(repositoryOf(context), await sourceHead(context), at);
      if (!file) throw new ToolError(`There is no file "${input.path}" in the working directory.`);
      const head = file.content.subarray(0, MAX_READ_BYTES);
      if (head.includes(0)) return { path: input.path, size: file.size, binary: true };
      return {
        path: input.path,
        content: head.toString('utf8'),
        ...(file.size > MAX_READ_BYTES && { truncated: true, size: file.size }),
      };
    },
  }),
  tool({
    name: 'write_files',
    access: 'WRITE',
    description:
      'Writes files (whole contents) into the working directory and commits them, in one commit, to the target branch.',
    parameters: Type.Object(
      {
        files: Type.Array(
          Type.Object(
            {
              path: Type.String({ minLength: 1, description: 'file path inside the working directory' }),
              content: Type.String({ maxLength: MAX_WRITTEN_BYTES, description: 'the whole new content' }),
            },
            { additionalProperties: false },
          ),
          { minItems: 1, maxItems: MAX_WRITTEN_FILES },
        ),
        message: Type.String({ minLength: 1, maxLength: 4000, description: 'commit message' }),
      },
      { additionalProperties: false },
    ),
    async run(context, input) {
      const { task } = context;
      if (task.mode !== 'ACT' || !task.targetBranchName)
        throw new ToolError('This task is in PLAN mode: it proposes changes and writes nothing.');
      const files = input.files.map((file) => ({
        path: pathInWorkingDirectory(task.workingDirectory, file.path),
        content: file.content,
      }));
      const repeated = files.find((file, index) => files.findIndex((other) => other.path === file.path) !== index);
      if (repeated) throw new ToolError(`"${repeated.path}" is listed more than once.`);
      // Every Git operation on the project's repository waits while it is being migrated; one that now
      // lives elsewhere (a migration ended) is not the hosted copy's to change.
      await assertNoMigrationInProgress(context.db, task.projectId);
      if (await externalRepositoryOf(context.db, task.projectId)) {
        throw new ToolError("The project's repository is now an external one; this task can no longer commit to it.");
      }
      const commit = await commitFiles(repositoryOf(context), {
        branch: task.targetBranchName,
        baseCommit: await sourceHead(context),
        files,
        message: input.message,
        author: { name: `${task.agentName} (AI agent)`, email: 'ai-agent@platform-api.invalid' },
      });
      return { branch: task.targetBranchName, ...commit, files: files.map((file) => file.path) };
    },
  }),
  tool({
    name: 'list_pipelines',
    access: 'READ',
    description: "Lists the pipelines published to the task's environment (its latest enabled artifact).",
    parameters: Type.Object({ page: Page }, { additionalProperties: false }),
    async run(context, { page = 0 }) {
      const environmentId = await requireEnvironmentId(context.db, context.task.projectId, context.task.environmentName);
      return {
        environmentName: context.task.environmentName,
        page,
        ...(await listPublishedPipelines(context.db, environmentId, { page, size: LIST_SIZE })),
      };
    },
  }),
  tool({
    name: 'list_variables',
    access: 'READ',
    description: 'Lists the project variables with their default values.',
    parameters: Type.Object({ page: Page }, { additionalProperties: false }),
    async run(context, { page = 0 }) {
      return await listVariables(context.db, context.task.accountId, context.task.projectId, { page, size: LIST_SIZE });
    },
  }),
  tool({
    name: 'list_environments',
    access: 'READ',
    description: 'Lists the environments of the project.',
    parameters: Type.Object({ page: Page }, { additionalProperties: false }),
    async run(context, { page = 0 }) {
      return await listEnvironments(context.db, context.task.accountId, context.task.projectId, { page, size: LIST_SIZE });
    },
  }),
  tool({
    name: 'run_pipeline',
    access: 'WRITE',
    description:
      "Runs a pipeline of the task's environment (its latest enabled artifact version) on the environment's agent, " +
      `waits up to waitSeconds (at most ${MAX_RUN_WAIT_SECONDS}) for it to finish, and answers its status and steps.`,
    parameters: Type.Object(
      {
        pipelineName: Type.String({ minLength: 1, description: 'the pipeline file, e.g. pipelines/load.orch.yaml' }),
        scalarVariables: Type.Optional(Type.Record(Type.String(), Type.Union([Type.String(), Type.Number()]))),
        waitSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_RUN_WAIT_SECONDS, default: 60 })),
      },
      { additionalProperties: false },
    ),
    async run(context, { pipelineName, scalarVariables, waitSeconds = 60 }) {
      const { accountId, projectId, environmentName } = context.task;
      const executionId = await refusalsAsToolErrors(async () => {
        const run = await preparePipelineRun(context.db, {
          accountId,
          projectId,
          environmentName,
          pipelineName,
          scalarVariables,
          trigger: 'API',
        });
        return context.db
          .transaction()
          .execute((trx) => createExecution(trx, 'PIPELINE', run, { pipelineName: run.pipelineName }));
      });
      const deadline = Date.now() + waitSeconds * 1000;
      for (;;) {
        const answer = await executionOf(context, executionId);
        if (isFinal(answer.status as ExecutionStatus) || Date.now() >= deadline) return answer;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    },
  }),
  tool({
    name: 'get_pipeline_execution',
    access: 'READ',
    description: 'Reads a pipeline execution of the project: its status, message and steps.',
    parameters: Type.Object({ pipelineExecutionId: Type.String({ format: 'uuid' }) }, { additionalProperties: false }),
    async run(context, { pipelineExecutionId }) {
      return refusalsAsToolErrors(() => executionOf(context, pipelineExecutionId));
    },
  }),
];

/** What the model is told of a run: its summary and its first steps. */
async function executionOf(context: ToolContext, executionId: string) {
  const row = await requireExecution(context.db, context.task.accountId, context.task.projectId, executionId, 'PIPELINE');
  const steps = await listSteps(context.db, executionId, { page: 0, size: LIST_SIZE });
  return { ...toSummary(row), steps: steps.results, ...(steps.total > LIST_SIZE && { stepsTruncated: true }) };
}

/** A refusal of the API (unknown pipeline, disabled version, bad variables) goes back to the model to read. */
async function refusalsAsToolErrors<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof ProblemError) {
      throw new ToolError([error.message, ...(error.options.violations ?? [])].join(' '));
    }
    throw error;
  }
}

export const toolNamed = (name: string) => TOOLS.find((candidate) => candidate.name === name);

/** The tools a task of `mode` offers its model: PLAN tasks do not see the WRITE ones. */
export const toolsFor = (mode: string) => TOOLS.filter((candidate) => mode === 'ACT' || candidate.access === 'READ');

export type ToolOutcome = { result: unknown } | { error: string };

/**
 * Runs one call the model asked for. What the model can act on (a bad argument, a missing file, a branch
 * moved meanwhile, a migration in progress) comes back as an error result; other failures are thrown.
 */
export async function runTool(context: ToolContext, name: string, input: unknown): Promise<ToolOutcome> {
  const found = toolsFor(context.task.mode).find((candidate) => candidate.name === name);
  if (!found) return { error: `There is no tool "${name}" in this task.` };
  const candidate = Value.Default(found.parameters, structuredClone(input ?? {}));
  if (!Value.Check(found.parameters, candidate)) {
    const problems = [...Value.Errors(found.parameters, candidate)].map(
      (issue) => `${issue.instancePath || '/'} ${issue.message}`,
    );
    return { error: `The arguments do not fit the tool: ${problems.slice(0, 5).join('; ')}.` };
  }
  try {
    return { result: await found.run(context, candidate) };
  } catch (error) {
    if (error instanceof ToolError || error instanceof GitError) return { error: error.message };
    if (error instanceof ProblemError) return { error: `Refused (${error.status}): ${error.message}` };
    throw error;
  }
}
