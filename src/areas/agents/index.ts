/**
 * The agents area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { agentNameWhere, agentsById, agentsInContactSince, findAgent } from './repository.ts';
export { isConnected, isPaused, requireAgent } from './service.ts';
export { AgentParams } from './schemas.ts';
export {
  cancelAgentWork,
  cancelledWorkIds,
  enqueueAgentWork,
  findAgentWork,
  goneWorkIds,
  unfinishedWorkOf,
  type AgentReport,
  type AgentWork,
  type AgentWorkReportHandler,
} from './work.ts';
export { AgentWorkReports } from './work-reports.ts';
export { AgentDeletion } from './deletion.ts';
export { HostedAgents, hostedAgentOf, HOSTED_AGENT_NAME, HOSTED_TYPE } from './hosted.ts';
