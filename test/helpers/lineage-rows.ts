import { createHash } from 'node:crypto';
import type { Db } from '../../src/core/db/database.ts';

/** The empty datasets body the seeded steps share, and its hash (as recording keys a body). */
export const EMPTY_BODY = JSON.stringify({ inputs: [], outputs: [] });
export const EMPTY_HASH = createHash('sha256').update(EMPTY_BODY).digest('base64url');

/** A step row of the project recorded at `at` (ms), as recording writes one; `n` numbers its run and step. */
export function lineageStepRow(accountId: string, projectId: string, at: number, n: number) {
  const time = new Date(at).toISOString();
  return {
    accountId,
    projectId,
    executionId: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
    generatedAt: time,
    eventTime: time,
    jobName: 'marts/orders.orch.yaml',
    jobKind: 'STEP' as const,
    stepIndex: n,
    stepName: `step ${n}`,
    stepStatus: 'SUCCESS',
    bodyHash: EMPTY_HASH,
    runId: null,
    parent: null,
    runPhase: null,
  };
}

/** Steps recorded at `times` (ms) in the project, written straight into the store (with their body once). */
export async function seedLineageSteps(db: Db, accountId: string, projectId: string, times: number[], first = 0): Promise<void> {
  await db
    .insertInto('lineageBodies')
    .values({ projectId, hash: EMPTY_HASH, body: EMPTY_BODY })
    .onConflict((oc) => oc.columns(['projectId', 'hash']).doNothing())
    .execute();
  await db
    .insertInto('lineageSteps')
    .values(times.map((at, i) => lineageStepRow(accountId, projectId, at, first + i)))
    .execute();
}
