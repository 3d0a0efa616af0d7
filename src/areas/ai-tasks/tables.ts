import type { Generated } from 'kysely';

export interface AiTaskTable {
  id: string;
  accountId: string;
  projectId: string;
  environmentName: string;
  agentName: string;
  mode: string;
  sourceBranchName: string;
  /** The branch writes are committed to; named by the server when generateBranch is set; null in PLAN mode. */
  targetBranchName: string | null;
  generateBranch: number;
  graphId: string | null;
  /** Repository path the agent works in, without leading or trailing slash; '' is the root. */
  workingDirectory: string;
  /** JSON array of tool names the agent may run without asking. */
  grantedPermissions: string;
  status: string;
  /** Why the task is STOPPED or ERRORED. */
  statusDetail: string | null;
  /** JSON {toolCallId, toolName, access, arguments} of the tool call waiting for the user's permission. */
  pendingPermission: string | null;
  /** The queued or running job of the task's next step; null when no step is under way. */
  stepJobId: string | null;
  turns: number;
  toolCalls: number;
  /** Time spent in steps (model calls and tools), which the time limit bounds. */
  workedMs: number;
  createdBy: string;
  createdAt: string;
  updatedAt: string;
}

export interface AiTaskMessageTable {
  id: Generated<number>;
  taskId: string;
  groupId: string;
  /** JSON object with a `type` (see schemas.ts, TaskMessageData). */
  data: string;
  createdAt: string;
}

export interface AiTaskTables {
  aiTasks: AiTaskTable;
  aiTaskMessages: AiTaskMessageTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends AiTaskTables {}
}
