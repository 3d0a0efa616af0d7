import type { PortableMigration } from './types.ts';
import { serialKey } from './types.ts';

/** AI agent tasks and the messages of their conversations (the messages are also what the model is shown). */
export const aiTasks: PortableMigration = {
  async up(db, dialect) {
    await db.schema
      .createTable('ai_tasks')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
      .addColumn('project_id', 'text', (c) => c.notNull().references('projects.id').onDelete('cascade'))
      .addColumn('environment_name', 'text', (c) => c.notNull())
      .addColumn('agent_name', 'text', (c) => c.notNull())
      .addColumn('mode', 'text', (c) => c.notNull())
      .addColumn('source_branch_name', 'text', (c) => c.notNull())
      .addColumn('target_branch_name', 'text')
      .addColumn('generate_branch', 'integer', (c) => c.notNull())
      .addColumn('graph_id', 'text')
      .addColumn('working_directory', 'text', (c) => c.notNull())
      .addColumn('granted_permissions', 'text', (c) => c.notNull())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('status_detail', 'text')
      .addColumn('pending_permission', 'text')
      .addColumn('step_job_id', 'text')
      .addColumn('turns', 'integer', (c) => c.notNull())
      .addColumn('tool_calls', 'integer', (c) => c.notNull())
      .addColumn('worked_ms', 'bigint', (c) => c.notNull())
      .addColumn('created_by', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('ai_tasks_account').on('ai_tasks').columns(['account_id', 'created_at']).execute();
    await db.schema.createIndex('ai_tasks_project').on('ai_tasks').column('project_id').execute();

    await db.schema
      .createTable('ai_task_messages')
      .addColumn('id', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('task_id', 'text', (c) => c.notNull().references('ai_tasks.id').onDelete('cascade'))
      .addColumn('group_id', 'text', (c) => c.notNull())
      .addColumn('data', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('ai_task_messages_task').on('ai_task_messages').columns(['task_id', 'id']).execute();
  },
};
