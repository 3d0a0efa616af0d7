import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';

/** HYBRID: run by the customer in their own cloud (the reference agent is one); FULL_SAAS: run by the operator. */
export const AGENT_TYPES = ['HYBRID', 'FULL_SAAS'] as const;
export const CLOUD_PROVIDERS = ['aws', 'azure', 'gcp'] as const;
/** Where an agent of each cloud provider may be deployed. */
export const DEPLOYMENTS: Record<(typeof CLOUD_PROVIDERS)[number], readonly string[]> = {
  aws: ['fargate', 'eks'],
  azure: ['aci', 'aks'],
  gcp: ['gke', 'gce'],
};
/**
 * PENDING: never in contact; RUNNING: takes work; PAUSED: takes no work until pausedUntil (or until resumed);
 * STOPPED: takes no work until resumed. The moves are in `nextAgentStatus` (repository.ts).
 */
export const AGENT_STATUSES = ['PENDING', 'RUNNING', 'PAUSED', 'STOPPED'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];

const AgentId = Type.String({ format: 'uuid', examples: ['0b7d4c52-4f0e-4c8e-8a57-2f1f4bb0d3a9'] });
export const AgentParams = Type.Object({ agentId: AgentId });

const Name = Type.String({ minLength: 1, maxLength: 255 });
const Description = Type.String({ maxLength: 4000 });

export const CreateAgentRequest = Type.Object(
  {
    name: Name,
    description: Type.Optional(Description),
    agentType: Type.Enum(AGENT_TYPES, { description: 'HYBRID: hosted by the customer; FULL_SAAS: hosted by the operator' }),
    cloudProvider: Type.Enum(CLOUD_PROVIDERS),
    deployment: Type.Enum(Object.values(DEPLOYMENTS).flat(), {
      description: 'one of the cloud provider: aws fargate|eks, azure aci|aks, gcp gke|gce',
    }),
  },
  {
    additionalProperties: false,
    examples: [
      { name: 'eu-prod', description: 'Production agent', agentType: 'HYBRID', cloudProvider: 'aws', deployment: 'fargate' },
    ],
  },
);
export type CreateAgentRequest = Static<typeof CreateAgentRequest>;

export const UpdateAgentRequest = Type.Object(
  {
    name: Type.Optional(Name),
    description: Type.Optional(Description),
    agentStatus: Type.Optional(Type.Enum(['RUNNING', 'PAUSED', 'STOPPED'], { description: 'resume, pause or stop the agent' })),
    pausedUntil: Type.Optional(Type.String({ format: 'date-time', description: 'with PAUSED: when the pause ends by itself' })),
  },
  { additionalProperties: false, examples: [{ agentStatus: 'PAUSED', pausedUntil: '2026-12-01T08:00:00Z' }] },
);
export type UpdateAgentRequest = Static<typeof UpdateAgentRequest>;

export const AgentSummary = Type.Object(
  {
    agentId: AgentId,
    agentStatus: Type.Enum(AGENT_STATUSES),
    agentType: Type.Enum(AGENT_TYPES),
    cloudProvider: Type.Enum(CLOUD_PROVIDERS),
    connected: Type.Boolean({ description: 'a heartbeat arrived within the last DPC_AGENT_CONNECTED_SECONDS' }),
    deployment: Type.String(),
    description: Type.Optional(Type.String()),
    name: Type.String(),
    pausedUntil: Type.Optional(Type.String({ format: 'date-time' })),
  },
  {
    examples: [
      {
        agentId: '0b7d4c52-4f0e-4c8e-8a57-2f1f4bb0d3a9',
        agentStatus: 'RUNNING',
        agentType: 'HYBRID',
        cloudProvider: 'aws',
        connected: true,
        deployment: 'fargate',
        description: 'Production agent',
        name: 'eu-prod',
      },
    ],
  },
);
export type AgentSummary = Static<typeof AgentSummary>;

export const Agent = Type.Object({
  ...AgentSummary.properties,
  hasCertificate: Type.Boolean({ description: 'the agent has registered its certificate (secrets can be sent to it)' }),
  hasCredentials: Type.Boolean({ description: 'credentials were issued' }),
  lastHeartbeatAt: Type.Optional(Type.String({ format: 'date-time' })),
  createdAt: Type.String({ format: 'date-time' }),
});
export type Agent = Static<typeof Agent>;

export const AgentListQuery = Type.Object({
  ...PageQuery.properties,
  agentStatus: Type.Optional(Type.Enum(AGENT_STATUSES)),
  agentType: Type.Optional(Type.Enum(AGENT_TYPES)),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'agents whose name contains this, any case' })),
});
export type AgentListQuery = Static<typeof AgentListQuery>;

export const CreateAgentResponse = Type.Object(
  { agentId: AgentId },
  { examples: [{ agentId: '0b7d4c52-4f0e-4c8e-8a57-2f1f4bb0d3a9' }] },
);

export const AgentCredentials = Type.Object(
  {
    clientId: Type.String(),
    clientSecret: Type.String({ description: 'shown once; issuing new credentials makes the old ones stop working' }),
  },
  { examples: [{ clientId: 'agent-4qB1xX0mZ2v7', clientSecret: 'e0p2...' }] },
);
