import type { PortableMigration } from './types.ts';

/** Agents (each with its own client credentials and certificate), the work handed to them, and streaming pipelines. */
export const agents: PortableMigration = {
  async up(db) {
    await db.schema
      .createTable('agents')
      .addColumn('id', 'text', (c) => c.primaryKey())
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
      .addColumn('certificate_pem', 'text')
      .addColumn('last_contact_at', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('agents_account_name', ['account_id', 'name'])
      .execute();

    await db.schema
      .createTable('agent_work')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('agent_id', 'text', (c) => c.notNull().references('agents.id').onDelete('cascade'))
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('payload', 'text')
      .addColumn('state', 'text', (c) => c.notNull())
      .addColumn('deliveries', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('leased_until', 'text')
      .addColumn('cancel_requested', 'integer', (c) => c.notNull().defaultTo(0))
      .addColumn('result', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('finished_at', 'text')
      .execute();
    await db.schema.createIndex('agent_work_agent_state').on('agent_work').columns(['agent_id', 'state', 'created_at']).execute();

    await db.schema
      .createTable('streaming_pipelines')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('agent_id', 'text', (c) => c.notNull().references('agents.id'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('definition', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('status_message', 'text')
      .addColumn('status_changed_at', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('streaming_pipelines_project_name', ['project_id', 'name'])
      .execute();
    await db.schema.createIndex('streaming_pipelines_agent').on('streaming_pipelines').column('agent_id').execute();
  },
};
