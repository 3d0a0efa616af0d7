import { randomUUID } from 'node:crypto';
import type { Store } from '../../src/core/db/database.ts';
import { applyAgentReport } from '../../src/areas/executions/lifecycle.ts';

/** Runs as the benchmarks of run-state changes seed them (bench/lineage.ts, bench/events.ts): straight into the store. */

/** A project with one environment. */
export async function seedProject(store: Store, accountId: string): Promise<{ projectId: string; environmentId: string }> {
  const projectId = randomUUID();
  const environmentId = randomUUID();
  const at = new Date().toISOString();
  await store.db
    .insertInto('projects')
    .values({ id: projectId, accountId, name: `bench ${projectId}`, description: null, createdBy: 'bench', createdAt: at })
    .execute();
  await store.db
    .insertInto('environments' as never)
    .values({ id: environmentId, projectId, name: 'bench', createdAt: at } as never)
    .execute();
  return { projectId, environmentId };
}

/** `count` RUNNING runs, each held by an agent work (its id the run's `agentWorkId`); answers the work ids. */
export async function seedRuns(store: Store, accountId: string, projectId: string, environmentId: string, count: number) {
  const at = new Date().toISOString();
  const works = Array.from({ length: count }, () => randomUUID());
  await store.db
    .insertInto('executions')
    .values(
      works.map((workId) => ({
        id: randomUUID(),
        accountId,
        projectId,
        environmentId,
        environmentName: 'bench',
        kind: 'PIPELINE',
        pipelineName: 'marts/orders.orch.yaml',
        testScope: null,
        testName: null,
        versionName: 'v1',
        agentId: 'a',
        agentWorkId: workId,
        executionTag: null,
        runningTag: null,
        trigger: 'API',
        scheduleId: null,
        scheduledFor: null,
        status: 'RUNNING',
        message: null,
        variables: '{}',
        startedAt: at,
        finishedAt: null,
        lastReportAt: null,
      })),
    )
    .execute();
  return works;
}

/** Applies an agent's report on work `workId` (a run seedRuns made) as the server does, in a transaction of its own. */
export function applyReport(
  store: Store,
  accountId: string,
  workId: string,
  report: { type: 'progress' | 'done'; body: unknown },
) {
  return store.db.transaction().execute((trx) => applyAgentReport(trx, { work: { id: workId, accountId } as never, report }));
}
