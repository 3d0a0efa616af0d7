/**
 * Whether lineage is recorded (DPC_LINEAGE, default on): off, the area writes no row (a batch run's START and
 * end, a step's datasets, a streaming run's events) and so queues no push; what was recorded before is still
 * read. Kept per store (tests run several servers in one process), keyed as push.ts keys a store.
 */
import type { Executor } from '../../core/db/database.ts';
import { storeKey } from './push.ts';

/** The stores lineage is not recorded in: on unless the app that opened the store turned it off. */
const off = new WeakSet<object>();

/** Sets whether lineage is recorded in `db`'s store (where the app starts the lineage area). */
export function setLineageRecording(db: Executor, on: boolean): void {
  if (on) off.delete(storeKey(db));
  else off.add(storeKey(db));
}

/** Whether lineage is recorded in `db`'s store (DPC_LINEAGE). */
export function recordsLineage(db: Executor): boolean {
  return !off.has(storeKey(db));
}
