/**
 * The agents area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { isConnected, isPaused, requireAgent } from './repository.ts';
export { AgentParams } from './schemas.ts';
export {
  cancelAgentWork,
  enqueueAgentWork,
  findAgentWork,
  type AgentReport,
  type AgentWork,
  type AgentWorkReportHandler,
} from './work.ts';
export { AgentWorkReports } from './work-reports.ts';
