/**
 * Table types, as the code sees them (camelCase; the CamelCasePlugin maps them to snake_case columns).
 * Booleans are stored as 0/1 integers and times as ISO 8601 text so that one set of migrations
 * serves SQLite and PostgreSQL alike. Each area declares its own tables beside its code.
 */
import type { Generated } from 'kysely';
import type { ProjectTables } from '../../areas/projects/tables.ts';
import type { EnvironmentTables } from '../../areas/environments/tables.ts';
import type { ConnectionTables } from '../../areas/connections/tables.ts';
import type { VariableTables } from '../../areas/variables/tables.ts';
import type { SecretReferenceTables } from '../../areas/secret-references/tables.ts';
import type { ArtifactTables } from '../../areas/artifacts/tables.ts';
import type { SharedPipelineTables } from '../../areas/shared-pipelines/tables.ts';
import type { ConnectorTables } from '../../areas/connectors/tables.ts';
import type { OAuthConnectionTables } from '../../areas/oauth-connections/tables.ts';
import type { AiTaskTables } from '../../areas/ai-tasks/tables.ts';
import type { ScimTables } from '../../areas/scim/tables.ts';
import type { AgentTables } from '../../areas/agents/tables.ts';
import type { StreamingPipelineTables } from '../../areas/streaming-pipelines/tables.ts';
import type { ExecutionTables } from '../../areas/executions/tables.ts';
import type { ScheduleTables } from '../../areas/schedules/tables.ts';
import type { RepositoryTables } from '../../areas/repositories/tables.ts';

export interface AccountTable {
  id: string;
  name: string;
  createdAt: string;
}

export interface ApiClientTable {
  id: string;
  accountId: string;
  name: string;
  role: string;
  secretHash: string;
  createdAt: string;
  /** Set when the client is revoked: it gets no token, and its tokens stop working. */
  revokedAt: string | null;
}

export interface SigningKeyTable {
  kid: string;
  privateJwk: string;
  publicJwk: string;
  createdAt: string;
  /** Set when a newer key takes over signing; the key still verifies until its last token expires. */
  retiredAt: string | null;
}

export interface AuditEventTable {
  id: Generated<number>;
  accountId: string;
  clientId: string;
  method: string;
  route: string;
  path: string;
  status: number;
  projectId: string | null;
  resourceIds: string;
  occurredAt: string;
}

export interface JobTable {
  id: string;
  type: string;
  payload: string;
  state: string;
  runAt: string;
  attempts: number;
  maxAttempts: number;
  lockedBy: string | null;
  lockedUntil: string | null;
  lastError: string | null;
  createdAt: string;
  finishedAt: string | null;
}

export interface CoreTables {
  accounts: AccountTable;
  apiClients: ApiClientTable;
  signingKeys: SigningKeyTable;
  auditEvents: AuditEventTable;
  jobs: JobTable;
}

export interface Database
  extends
    CoreTables,
    ProjectTables,
    EnvironmentTables,
    ConnectionTables,
    VariableTables,
    SecretReferenceTables,
    ArtifactTables,
    SharedPipelineTables,
    ConnectorTables,
    OAuthConnectionTables,
    ScimTables,
    AgentTables,
    StreamingPipelineTables,
    ExecutionTables,
    ScheduleTables,
    RepositoryTables,
    AiTaskTables {}
