import type { PortableMigration } from './types.ts';

/** Pipeline and test executions with their steps, and the schedules that start pipeline executions. */
export const executions: PortableMigration = {
  async up(db) {
    // agent_id is not a foreign key: the history of an agent's runs outlives the agent.
    await db.schema
      .createTable('executions')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('environment_id', 'text', (c) => c.notNull().references('environments.id').onDelete('cascade'))
      .addColumn('environment_name', 'text', (c) => c.notNull())
      .addColumn('kind', 'text', (c) => c.notNull())
      .addColumn('pipeline_name', 'text')
      .addColumn('test_scope', 'text')
      .addColumn('test_name', 'text')
      .addColumn('version_name', 'text', (c) => c.notNull())
      .addColumn('agent_id', 'text', (c) => c.notNull())
      .addColumn('agent_work_id', 'text')
      .addColumn('execution_tag', 'text')
      .addColumn('running_tag', 'text')
      .addColumn('trigger', 'text', (c) => c.notNull())
      .addColumn('schedule_id', 'text')
      .addColumn('scheduled_for', 'text')
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('message', 'text')
      .addColumn('variables', 'text', (c) => c.notNull())
      .addColumn('started_at', 'text', (c) => c.notNull())
      .addColumn('finished_at', 'text')
      .addColumn('last_report_at', 'text')
      .addUniqueConstraint('executions_running_tag', ['project_id', 'running_tag'])
      .addUniqueConstraint('executions_schedule_due', ['schedule_id', 'scheduled_for'])
      .execute();
    // The account-wide list walks newest first; the report handler finds a run by its work.
    await db.schema
      .createIndex('executions_account_started')
      .on('executions')
      .columns(['account_id', 'started_at', 'id'])
      .execute();
    await db.schema.createIndex('executions_project').on('executions').column('project_id').execute();
    await db.schema.createIndex('executions_environment').on('executions').column('environment_id').execute();
    await db.schema.createIndex('executions_agent_work').on('executions').column('agent_work_id').execute();
    await db.schema.createIndex('executions_status').on('executions').columns(['status', 'agent_id']).execute();

    await db.schema
      .createTable('execution_steps')
      .addColumn('execution_id', 'text', (c) => c.notNull().references('executions.id').onDelete('cascade'))
      .addColumn('position', 'integer', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('started_at', 'text', (c) => c.notNull())
      .addColumn('finished_at', 'text')
      .addColumn('message', 'text')
      .addColumn('child_pipeline', 'text')
      .addPrimaryKeyConstraint('execution_steps_pk', ['execution_id', 'position'])
      .execute();

    await db.schema
      .createTable('schedules')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('environment_id', 'text', (c) => c.notNull().references('environments.id').onDelete('cascade'))
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('pipeline_name', 'text', (c) => c.notNull())
      .addColumn('cron_expression', 'text', (c) => c.notNull())
      .addColumn('timezone', 'text', (c) => c.notNull())
      .addColumn('enabled', 'integer', (c) => c.notNull())
      .addColumn('next_run_at', 'text')
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addUniqueConstraint('schedules_project_name', ['project_id', 'name'])
      .execute();
    await db.schema.createIndex('schedules_due').on('schedules').columns(['enabled', 'next_run_at']).execute();
    await db.schema.createIndex('schedules_environment').on('schedules').column('environment_id').execute();
  },
};
