/**
 * The reference agent's handlers of executions: `execute-pipeline` runs one orchestration pipeline,
 * `execute-tests` runs test pipelines one after another. Steps go to the server as progress reports
 * (`{step}`); the outcome is the final report: done for a success, a WorkFailure with code
 * `pipeline-failed` or `cancelled` otherwise (the server's executions area reads these codes).
 */
import { WorkFailure, type WorkContext, type WorkHandler } from './work-context.ts';
import { parsePipeline, PipelineFileError } from '../contract/pipeline-file.ts';
import { FAILURE_CODES, type ExecutionPayload } from '../contract/work.ts';
import { runPipeline, variablesOf, type RunServices } from './pipeline-runner.ts';
import { runScript } from './scripts.ts';
import { openWarehouse } from './warehouse/index.ts';

/** What the runner may use for this run: its environment's warehouse, the artifact's pipelines, scripts where allowed. */
function servicesFor(payload: ExecutionPayload, ctx: WorkContext): RunServices {
  return {
    warehouse: () =>
      openWarehouse(payload.warehouse, {
        stateDir: ctx.stateDir,
        vault: ctx.vault,
        accountId: payload.accountId ?? 'default',
        environmentId: payload.environmentId ?? 'default',
        statementTimeoutMs: ctx.statementTimeoutMs,
        defaultWarehouseUrl: ctx.defaultWarehouseUrl,
        warehouseRoleKey: ctx.warehouseRoleKey,
        sandboxed: ctx.sandboxed,
      }),
    pipelines: payload.pipelines,
    projectVariables: payload.variables,
    ...(ctx.allowScripts && { runScript }),
  };
}

/** Runs `files` in order, numbering steps across them, and answers the overall outcome. */
async function runFiles(payload: ExecutionPayload, files: string[], ctx: WorkContext) {
  // Once cancelled, the server refuses further progress: the run is stopping anyway.
  const report = (body: unknown) => ctx.report(body).catch((error) => (ctx.signal.aborted ? undefined : Promise.reject(error)));
  const resolved = Object.assign(Object.create(null) as ExecutionPayload['variables'], payload.variables);
  const services = servicesFor(payload, ctx);
  let index = 0;
  const failures: string[] = [];
  const failed: string[] = [];
  for (const file of files) {
    const text = Object.hasOwn(payload.pipelines, file) ? payload.pipelines[file] : undefined;
    let pipeline;
    try {
      if (text === undefined) throw new PipelineFileError(`The run has no file "${file}".`);
      pipeline = parsePipeline(text);
    } catch (error) {
      const at = new Date().toISOString();
      const message = (error as Error).message;
      await report({
        step: { index, name: file, status: 'FAILED', startedAt: at, finishedAt: at, message, childPipeline: file },
      });
      index += 1;
      failures.push(`${file}: ${message}`);
      failed.push(file);
      continue;
    }
    const outcome = await runPipeline(pipeline, {
      variables: variablesOf(pipeline, resolved),
      services,
      signal: ctx.signal,
      firstIndex: index,
      ...(files.length > 1 && { childPipeline: file }),
      onStep: (step) => report({ step }),
      print: (line) => ctx.log(line, { executionId: payload.executionId }),
    });
    index += outcome.steps.length;
    if (outcome.status === 'CANCELLED') throw new WorkFailure(outcome.message, FAILURE_CODES.cancelled);
    if (outcome.status === 'FAILED') {
      failures.push(files.length > 1 ? `${file}: ${outcome.message}` : outcome.message);
      failed.push(file);
    }
  }
  // Every file ran to its end: with several, the server is told which failed (the others passed).
  if (failures.length > 0) {
    throw new WorkFailure(failures.join(' | '), FAILURE_CODES.pipelineFailed, files.length > 1 ? failed : undefined);
  }
  return { message: files.length > 1 ? `${files.length} test pipeline(s) passed.` : 'The pipeline succeeded.', steps: index };
}

/**
 * A run is not started again: a second delivery means the agent stopped while holding it, and its steps
 * may have had effects, so the run ends failed rather than running twice.
 */
function refuseRedelivery(delivery: number): void {
  if (delivery > 1) {
    throw new WorkFailure('The agent stopped during this run; it is not run a second time.', FAILURE_CODES.interrupted);
  }
}

export const executePipeline: WorkHandler = async (work, ctx) => {
  refuseRedelivery(work.delivery);
  const payload = work.payload as ExecutionPayload;
  return runFiles(payload, [payload.pipelineName ?? ''], ctx);
};

export const executeTests: WorkHandler = async (work, ctx) => {
  refuseRedelivery(work.delivery);
  const payload = work.payload as ExecutionPayload;
  return runFiles(payload, payload.tests ?? [], ctx);
};
