import type { Migration } from 'kysely';
import type { Dialect } from './types.ts';
import type { PortableMigration } from './types.ts';
import { foundation } from './0001_foundation.ts';
import { projectConfiguration } from './0002_project_configuration.ts';
import { artifacts } from './0003_artifacts.ts';
import { connectors } from './0004_connectors.ts';
import { agents } from './0006_agents.ts';
import { repositories } from './0007_repositories.ts';
import { scim } from './0008_scim.ts';
import { clientRevocation } from './0009_client_revocation.ts';
import { executions } from './0012_executions.ts';
import { aiTasks } from './0013_ai_tasks.ts';
import { agentSealedSecrets } from './0029_agent_sealed_secrets.ts';
import { environmentWarehouse } from './0031_environment_warehouse.ts';
import { outbox } from './0033_outbox.ts';
import { outboxOrder } from './0033_outbox_order.ts';
import { conditionalLocks } from './0033_conditional_locks.ts';
import { webhooks } from './0033_webhooks.ts';
import { idempotency } from './0033_idempotency.ts';
import { agentPresence } from './0033_agent_presence.ts';
import { lineage } from './0034_lineage.ts';
import { agentReportSequence } from './0036_agent_report_sequence.ts';
import { lineageWriteCost } from './0037_lineage_write_cost.ts';
import { stepRowsWritten } from './0037_step_rows_written.ts';
import { streamingProgress } from './0037_streaming_progress.ts';
import { lineageCompact } from './0038_lineage_compact.ts';
import { rowVersions } from './0038_row_versions.ts';
import { outboxLighterWrites } from './0038_outbox_lighter_writes.ts';
import { outboxIdsInMemory } from './0039_outbox_ids_in_memory.ts';
import { rowVersionsEverywhere } from './0040_row_versions_everywhere.ts';
import { outboxIdBlocks } from './0041_outbox_id_blocks.ts';
import { idempotencySealed } from './0042_idempotency_sealed.ts';
import { jobGroups } from './0043_job_groups.ts';
import { executionBilling } from './0044_execution_billing.ts';
import { outboxSharedCounter } from './0045_outbox_shared_counter.ts';
import { lineageRuns } from './0046_lineage_runs.ts';
import { stepRunsPipeline } from './0047_step_runs_pipeline.ts';
import { lineageDays } from './0048_lineage_days.ts';
import { lineageDaysLateSteps } from './0049_lineage_days_late_steps.ts';

/** Every schema step in order. Add a file per step and list it here; never edit a landed step. */
const steps: Record<string, PortableMigration> = {
  '0001_foundation': foundation,
  '0002_project_configuration': projectConfiguration,
  '0003_artifacts': artifacts,
  '0004_connectors': connectors,
  '0006_agents': agents,
  '0007_repositories': repositories,
  '0008_scim': scim,
  '0009_client_revocation': clientRevocation,
  '0012_executions': executions,
  '0013_ai_tasks': aiTasks,
  '0029_agent_sealed_secrets': agentSealedSecrets,
  '0031_environment_warehouse': environmentWarehouse,
  '0033_outbox': outbox,
  '0033_outbox_order': outboxOrder,
  '0033_conditional_locks': conditionalLocks,
  '0033_webhooks': webhooks,
  '0033_idempotency': idempotency,
  '0033_agent_presence': agentPresence,
  '0034_lineage': lineage,
  '0036_agent_report_sequence': agentReportSequence,
  '0037_lineage_write_cost': lineageWriteCost,
  '0037_step_rows_written': stepRowsWritten,
  '0037_streaming_progress': streamingProgress,
  '0038_lineage_compact': lineageCompact,
  '0038_row_versions': rowVersions,
  '0038_outbox_lighter_writes': outboxLighterWrites,
  '0039_outbox_ids_in_memory': outboxIdsInMemory,
  '0040_row_versions_everywhere': rowVersionsEverywhere,
  '0041_outbox_id_blocks': outboxIdBlocks,
  '0042_idempotency_sealed': idempotencySealed,
  '0043_job_groups': jobGroups,
  '0044_execution_billing': executionBilling,
  '0045_outbox_shared_counter': outboxSharedCounter,
  '0046_lineage_runs': lineageRuns,
  '0047_step_runs_pipeline': stepRunsPipeline,
  '0048_lineage_days': lineageDays,
  '0049_lineage_days_late_steps': lineageDaysLateSteps,
};

export function migrationsFor(dialect: Dialect): Record<string, Migration> {
  return Object.fromEntries(Object.entries(steps).map(([name, step]) => [name, { up: (db) => step.up(db, dialect) }]));
}
