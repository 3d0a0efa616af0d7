import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';

/**
 * CUSTOMER_HOSTED: runs in the customer's cloud and holds the customer's secrets (the hybrid model; the
 * reference agent `dpc agent run` is one). PLATFORM_HOSTED: run by the platform operator for the account.
 * streaming: a customer-hosted agent that runs streaming pipelines, as the vendor's infrastructure-as-code
 * provider creates them (it reads `agentType` back and drops a resource whose type reads otherwise).
 */
export const AGENT_TYPES = ['CUSTOMER_HOSTED', 'PLATFORM_HOSTED', 'streaming'] as const;
export const CLOUD_PROVIDERS = ['aws', 'azure', 'gcp'] as const;
export const DEPLOYMENTS = ['fargate', 'eks', 'aci', 'aks', 'gke', 'gce'] as const;
/** Which deployments run on which cloud. */
export const DEPLOYMENTS_OF: Record<(typeof CLOUD_PROVIDERS)[number], readonly string[]> = {
  aws: ['fargate', 'eks'],
  azure: ['aci', 'aks'],
  gcp: ['gke', 'gce'],
};
/**
 * PENDING: created, never in contact. RUNNING: has been in contact since it last signed off.
 * PAUSED: pausedUntil lies ahead (it gets no work until then). STOPPED: signed off (its process stopped).
 */
export const AGENT_STATUSES = ['PENDING', 'RUNNING', 'PAUSED', 'STOPPED'] as const;
export type AgentStatus = (typeof AGENT_STATUSES)[number];

const AgentType = Type.Enum(AGENT_TYPES, {
  description:
    'CUSTOMER_HOSTED: runs in the customer cloud and holds its secrets; PLATFORM_HOSTED: run by the platform; streaming: a customer-hosted agent for streaming pipelines. Answered back as written.',
});
const CloudProvider = Type.Enum(CLOUD_PROVIDERS);
const Deployment = Type.Enum(DEPLOYMENTS, { description: 'aws: fargate|eks; azure: aci|aks; gcp: gke|gce' });
const AgentStatusSchema = Type.Enum(AGENT_STATUSES, {
  description:
    'PENDING (never in contact) -> RUNNING (first heartbeat) -> STOPPED (signed off) -> RUNNING (heartbeat again); PAUSED while pausedUntil is ahead',
});
const Name = Type.String({ minLength: 1, maxLength: 255 });
const Description = Type.String({ maxLength: 4000 });

export const AgentParams = Type.Object({ agentId: Type.String({ format: 'uuid', description: 'agent id (UUID)' }) });
export type AgentParams = Static<typeof AgentParams>;

export const CreateAgentRequest = Type.Object(
  {
    name: Name,
    description: Type.Optional(Description),
    agentType: AgentType,
    cloudProvider: CloudProvider,
    deployment: Deployment,
  },
  {
    examples: [
      {
        name: 'eu-agent',
        description: 'Runs in our AWS account',
        agentType: 'CUSTOMER_HOSTED',
        cloudProvider: 'aws',
        deployment: 'fargate',
      },
    ],
  },
);
export type CreateAgentRequest = Static<typeof CreateAgentRequest>;

export const UpdateAgentRequest = Type.Object(
  {
    name: Type.Optional(Name),
    description: Type.Optional(Type.Union([Description, Type.Null()])),
    agentType: Type.Optional(AgentType),
    cloudProvider: Type.Optional(CloudProvider),
    deployment: Type.Optional(Deployment),
    pausedUntil: Type.Optional(
      Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
        description: 'pause the agent (it gets no work) until then; null resumes it',
      }),
    ),
  },
  {
    description: 'a field left out keeps its value; cloudProvider and deployment must still fit together',
    examples: [{ description: 'Paused for maintenance', pausedUntil: '2030-01-01T00:00:00Z' }],
  },
);
export type UpdateAgentRequest = Static<typeof UpdateAgentRequest>;

const summaryExample = {
  agentId: '0f3c1e0a-8a53-4b8e-9d53-7f3f7c5d0a11',
  agentStatus: 'RUNNING',
  agentType: 'CUSTOMER_HOSTED',
  cloudProvider: 'aws',
  connected: true,
  deployment: 'fargate',
  description: 'Runs in our AWS account',
  name: 'eu-agent',
};

export const AgentSummary = Type.Object(
  {
    agentId: Type.String({ format: 'uuid' }),
    agentStatus: AgentStatusSchema,
    agentType: AgentType,
    cloudProvider: CloudProvider,
    connected: Type.Boolean({
      description: 'a heartbeat or poll arrived within the connected window (DPC_AGENT_CONNECTED_WINDOW_SECONDS)',
    }),
    deployment: Deployment,
    description: Type.Optional(Type.String()),
    name: Type.String(),
    pausedUntil: Type.Optional(Type.String({ format: 'date-time' })),
  },
  { examples: [summaryExample] },
);
export type AgentSummary = Static<typeof AgentSummary>;

export const Agent = Type.Object(
  {
    ...AgentSummary.properties,
    clientId: Type.Optional(Type.String({ description: 'the agent client id, once credentials are issued' })),
    certificateFingerprint: Type.Optional(Type.String({ description: 'SHA-256 fingerprint of the registered certificate' })),
    certificateNotAfter: Type.Optional(Type.String({ format: 'date-time' })),
    lastContactAt: Type.Optional(Type.String({ format: 'date-time' })),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { examples: [{ ...summaryExample, createdAt: '2026-01-01T00:00:00.000Z', lastContactAt: '2026-01-02T10:00:00.000Z' }] },
);
export type Agent = Static<typeof Agent>;

export const AgentQuery = Type.Object({
  ...PageQuery.properties,
  status: Type.Optional(Type.Enum(AGENT_STATUSES, { description: 'only agents of this agentStatus' })),
  type: Type.Optional(Type.Enum(AGENT_TYPES, { description: 'only agents of this agentType' })),
  name: Type.Optional(
    Type.String({ minLength: 1, maxLength: 255, description: 'only agents whose name contains this (any case)' }),
  ),
});
export type AgentQuery = Static<typeof AgentQuery>;

export const CreateAgentResponse = Type.Object(
  { agentId: Type.String({ format: 'uuid' }) },
  { examples: [{ agentId: summaryExample.agentId }] },
);

export const AgentCredentials = Type.Object(
  {
    clientId: Type.String(),
    clientSecret: Type.String({
      description: 'the same on every read until the credentials are rotated; kept hashed and sealed with the server key',
    }),
  },
  { examples: [{ clientId: '6a0e2b7c-1f44-4f7e-8f00-3c8a9b1d2e55', clientSecret: 'k3v1...' }] },
);
