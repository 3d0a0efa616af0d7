import { Type, type Static } from 'typebox';
import { EnvironmentName } from '../environments/index.ts';
import { ProjectId } from '../projects/index.ts';
import { TASK_STATUSES } from './states.ts';
import { TOOL_NAMES } from './tool-names.ts';

export const TaskMode = Type.Enum(['ACT', 'PLAN'], {
  description:
    'ACT: the agent may write files and commit them to the target branch. PLAN: it reads and proposes, and writes nothing.',
});
export type TaskMode = Static<typeof TaskMode>;

export const TaskStatus = Type.Enum(TASK_STATUSES, {
  description: 'RUNNING (working, or waiting for the user), STOPPING, STOPPED, ERRORED',
});

export const ToolName = Type.Enum(TOOL_NAMES, { description: 'a tool of the agent' });

const BranchName = Type.String({ minLength: 1, maxLength: 255, examples: ['main'] });

export const AgentConfig = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 255, description: 'agent name' }),
    environmentName: EnvironmentName,
    mode: TaskMode,
    projectId: ProjectId,
    sourceBranchName: { ...BranchName, description: 'the branch the agent reads, which must exist in the project repository' },
    generateBranch: Type.Optional(
      Type.Boolean({ default: false, description: 'ACT: commit to a new branch the server names (off the source branch)' }),
    ),
    graphId: Type.Optional(
      Type.String({ minLength: 1, maxLength: 255, description: 'opaque reference, kept and shown to the model' }),
    ),
    targetBranchName: Type.Optional({
      ...BranchName,
      description: 'ACT without generateBranch: the branch writes are committed to (created off the source branch if missing)',
    }),
    workingDirectory: Type.Optional(
      Type.String({
        maxLength: 1024,
        default: '',
        description: 'folder of the repository the agent works in; the root when empty',
      }),
    ),
  },
  { additionalProperties: false },
);
export type AgentConfig = Static<typeof AgentConfig>;

const Permission = Type.Object({ toolName: ToolName }, { additionalProperties: false });

export const CreateTaskRequest = Type.Object(
  {
    agentConfig: AgentConfig,
    message: Type.String({ minLength: 1, maxLength: 100_000, description: 'instruction or question for the agent' }),
    grantedPermissions: Type.Optional(
      Type.Array(Permission, { maxItems: 100, default: [], description: 'tools the agent may run without asking; each once' }),
    ),
  },
  {
    examples: [
      {
        agentConfig: {
          name: 'pipeline-builder',
          environmentName: 'dev',
          mode: 'ACT',
          projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
          sourceBranchName: 'main',
          generateBranch: true,
          workingDirectory: 'pipelines',
        },
        message: 'Add an orchestration pipeline that loads the orders table.',
        grantedPermissions: [{ toolName: 'list_files' }, { toolName: 'read_file' }],
      },
    ],
  },
);
export type CreateTaskRequest = Static<typeof CreateTaskRequest>;

export const TaskCreated = Type.Object({
  taskId: Type.String({ format: 'uuid' }),
  status: TaskStatus,
  agentName: Type.String(),
  createdAt: Type.String({ format: 'date-time' }),
});

export const ToolAccess = Type.Enum(['READ', 'WRITE']);

export const PendingPermission = Type.Object({
  toolCallId: Type.String(),
  toolName: Type.String(),
  access: ToolAccess,
  arguments: Type.Unknown(),
});
export type PendingPermission = Static<typeof PendingPermission>;

export const Task = Type.Object({
  taskId: Type.String({ format: 'uuid' }),
  status: TaskStatus,
  statusDetail: Type.Optional(Type.String({ description: 'why the task is STOPPED or ERRORED' })),
  agentName: Type.String(),
  agentConfig: Type.Object({
    name: Type.String(),
    environmentName: Type.String(),
    mode: TaskMode,
    projectId: Type.String(),
    sourceBranchName: Type.String(),
    generateBranch: Type.Boolean(),
    graphId: Type.Optional(Type.String()),
    targetBranchName: Type.Optional(Type.String({ description: 'the generated name when generateBranch is set' })),
    workingDirectory: Type.String(),
  }),
  grantedPermissions: Type.Array(Type.Object({ toolName: Type.String() })),
  pendingPermission: Type.Optional(PendingPermission),
  turns: Type.Integer({ description: 'model calls so far' }),
  toolCalls: Type.Integer({ description: 'tool calls the model asked for so far' }),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
});
export type Task = Static<typeof Task>;

export const MESSAGE_TYPES = [
  'USER_MESSAGE',
  'AGENT_MESSAGE',
  'TOOL_CALL',
  'TOOL_RESULT',
  'PERMISSION_REQUEST',
  'PERMISSION_ANSWER',
  'STATUS',
] as const;
export type MessageType = (typeof MESSAGE_TYPES)[number];

/** One entry of the conversation; which fields are present depends on `type` (see the README). */
export const TaskMessageData = Type.Object({
  type: Type.Enum(MESSAGE_TYPES),
  text: Type.Optional(Type.String()),
  toolCallId: Type.Optional(Type.String()),
  toolName: Type.Optional(Type.String()),
  access: Type.Optional(ToolAccess),
  arguments: Type.Optional(Type.Unknown()),
  result: Type.Optional(Type.Unknown()),
  error: Type.Optional(Type.String()),
  granted: Type.Optional(Type.Boolean()),
  status: Type.Optional(TaskStatus),
});
export type TaskMessageData = Static<typeof TaskMessageData>;

export const TaskMessage = Type.Object({
  data: TaskMessageData,
  groupId: Type.String({ description: 'the same for every message of one turn of the agent (or one answer of the user)' }),
  timestamp: Type.String({ format: 'date-time' }),
});

export const TaskParams = Type.Object({ taskId: Type.String({ format: 'uuid' }) });

export const FollowUpRequest = Type.Object(
  { message: Type.String({ minLength: 1, maxLength: 100_000 }) },
  { additionalProperties: false, examples: [{ message: 'Name the pipeline load_orders instead.' }] },
);

export const PermissionAnswer = Type.Object(
  {
    toolName: ToolName,
    granted: Type.Boolean({
      description: 'true runs the call and lets the agent use the tool from then on; false refuses the call',
    }),
  },
  { additionalProperties: false, examples: [{ toolName: 'write_files', granted: true }] },
);
export type PermissionAnswer = Static<typeof PermissionAnswer>;
