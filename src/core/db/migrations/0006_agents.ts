import type { PortableMigration } from './types.ts';
import { serialKey } from './types.ts';

/** Agents, the work the server hands them, and the streaming pipelines they run. */
export const agents: PortableMigration = {
  async up(db, dialect) {
    await db.schema
      .createTable('agents')
      .addColumn('seq', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('description', 'text')
      .addColumn('agent_type', 'text', (c) => c.notNull())
      .addColumn('cloud_provider', 'text', (c) => c.notNull())
      .addColumn('deployment', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('paused_until', 'text')
      .addColumn('client_id', 'text', (c) => c.unique())
      .addColumn('secret_hash', 'text')
      .addColumn('certificate', 'text')
      .addColumn('last_heartbeat_at', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('agents_account_name', ['account_id', 'name'])
      .execute();

    await db.schema
      .createTable('agent_work')
      .addColumn('seq', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('agent_id', 'text', (c) => c.notNull().references('agents.id').onDelete('cascade'))
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('payload', 'text')
      .addColumn('state', 'text', (c) => c.notNull())
      .addColumn('cancel_requested', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('deliveries', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('lease_until', 'text')
      .addColumn('result', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('finished_at', 'text')
      .execute();
    await db.schema.createIndex('agent_work_agent_state').on('agent_work').columns(['agent_id', 'state', 'seq']).execute();

    await db.schema
      .createTable('streaming_pipelines')
      .addColumn('seq', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('id', 'text', (c) => c.notNull().unique())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('agent_id', 'text', (c) => c.notNull().references('agents.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('definition', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('status_message', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('streaming_pipelines_project_name', ['project_id', 'name'])
      .execute();
  },
};
