import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { PortableMigration } from './types.ts';
import { serialKey } from './types.ts';

/**
 * Lineage (issue 34), written compactly: a step's event is a small row (the run, the job, the step, when)
 * and the datasets it read and wrote are a body kept once per project and content (a pipeline's step
 * reports the same tables run after run), so that recording a step's lineage writes about 150 bytes
 * rather than a whole OpenLineage event. The events are built when they are read (areas/lineage). The
 * steps carry no foreign key (its check cost every report a lookup, on PostgreSQL a row lock on the
 * account and the project): they go with their project through the project's deletion. The events of
 * lineage_events move over, and that table goes.
 */
export const lineageCompact: PortableMigration = {
  async up(db, dialect) {
    await db.schema
      .createTable('lineage_bodies')
      .addColumn('project_id', 'text', (c) => c.notNull())
      .addColumn('hash', 'text', (c) => c.notNull())
      .addColumn('body', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('lineage_bodies_pk', ['project_id', 'hash'])
      .execute();
    await db.schema
      .createTable('lineage_steps')
      .addColumn('id', serialKey(dialect), (c) => c.primaryKey())
      .addColumn('account_id', 'text', (c) => c.notNull())
      .addColumn('project_id', 'text', (c) => c.notNull())
      .addColumn('execution_id', 'text', (c) => c.notNull())
      .addColumn('generated_at', 'text', (c) => c.notNull())
      .addColumn('event_time', 'text', (c) => c.notNull())
      .addColumn('job_name', 'text', (c) => c.notNull())
      .addColumn('job_kind', 'text', (c) => c.notNull())
      .addColumn('step_index', 'integer', (c) => c.notNull())
      .addColumn('step_name', 'text', (c) => c.notNull())
      .addColumn('step_status', 'text', (c) => c.notNull())
      .addColumn('body_hash', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex('lineage_steps_by_account_time')
      .on('lineage_steps')
      .columns(['account_id', 'generated_at', 'id'])
      .execute();
    await moveEvents(db as Kysely<any>);
    await db.schema.dropTable('lineage_events').execute();
  },
};

interface StoredDataset {
  namespace: string;
  name: string;
  facets?: {
    schema?: { fields?: unknown[] };
    columnLineage?: { fields?: Record<string, { inputFields?: unknown[] }> };
  };
}

/** A dataset of a stored event as the agent reported it (the form lineage_bodies keeps). */
function reported(dataset: StoredDataset) {
  const columnLineage = dataset.facets?.columnLineage?.fields;
  return {
    namespace: dataset.namespace,
    name: dataset.name,
    ...(dataset.facets?.schema?.fields && { fields: dataset.facets.schema.fields }),
    ...(columnLineage && {
      columnLineage: Object.fromEntries(
        Object.entries(columnLineage).map(([column, { inputFields }]) => [column, inputFields ?? []]),
      ),
    }),
  };
}

/** Every event of lineage_events as a step and a body, in the order they were recorded. */
async function moveEvents(db: Kysely<any>): Promise<void> {
  let after = 0;
  for (;;) {
    const rows = (await db
      .selectFrom('lineageEvents')
      .selectAll()
      .where('id', '>', after)
      .orderBy('id')
      .limit(500)
      .execute()) as {
      id: number;
      accountId: string;
      projectId: string;
      executionId: string;
      generatedAt: string;
      event: string;
    }[];
    if (rows.length === 0) return;
    after = Number(rows.at(-1)!.id);
    const bodies = new Map<string, { projectId: string; hash: string; body: string }>();
    const steps = rows.map((row) => {
      const event = JSON.parse(row.event);
      const body = JSON.stringify({
        inputs: (event.inputs ?? []).map(reported),
        outputs: (event.outputs ?? []).map(reported),
        ...(typeof event.job?.facets?.sql?.query === 'string' && { sql: event.job.facets.sql.query }),
      });
      const hash = createHash('sha256').update(body).digest('base64url');
      bodies.set(`${row.projectId} ${hash}`, { projectId: row.projectId, hash, body });
      const step = event.run?.facets?.dpc_step ?? {};
      return {
        accountId: row.accountId,
        projectId: row.projectId,
        executionId: row.executionId,
        generatedAt: row.generatedAt,
        eventTime: event.eventTime ?? row.generatedAt,
        jobName: event.job?.name ?? '',
        jobKind: 'PIPELINE',
        stepIndex: Number(step.index ?? 0),
        stepName: String(step.name ?? ''),
        stepStatus: String(step.status ?? (event.eventType === 'COMPLETE' ? 'SUCCESS' : 'FAILED')),
        bodyHash: hash,
      };
    });
    await db
      .insertInto('lineageBodies')
      .values([...bodies.values()])
      .onConflict((oc) => oc.columns(['projectId', 'hash']).doNothing())
      .execute();
    await db.insertInto('lineageSteps').values(steps).execute();
  }
}
