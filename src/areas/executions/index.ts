/**
 * The executions area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { hasUnfinishedRun } from './repository.ts';
export { createExecution, listSteps, recordSkippedRun, requireExecution, toSummary } from './service.ts';
export { preparePipelineRun } from './run-start.ts';
export { PipelineName } from './schemas.ts';
export { EXECUTION_STATUSES, isFinal, type ExecutionStatus } from './states.ts';
export { usageByDay, type UsageRow } from './usage.ts';
