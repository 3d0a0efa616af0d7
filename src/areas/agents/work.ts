import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Selectable } from 'kysely';
import type { Executor, Store, Trx } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import type { AgentWorkTable } from './tables.ts';

/**
 * Work the server hands to agents, kept in the store so that it survives restarts and is shared by every
 * server process: PENDING until a poll of its agent takes it, DELIVERED while leased to that poll (the
 * agent names it in its heartbeats to keep the lease), then DONE, FAILED or CANCELLED by one report.
 * Delivery is at least once (a lapsed lease delivers it again); the final report is accepted once.
 */
export type AgentWorkState = 'PENDING' | 'DELIVERED' | 'DONE' | 'FAILED' | 'CANCELLED';
export type AgentWork = Selectable<AgentWorkTable>;

export interface AgentWorkReport {
  type: 'progress' | 'done' | 'failed';
  body: Record<string, unknown>;
}

/** Runs inside the transaction that records an agent's report, so an area updates its own rows with it. */
export type AgentWorkReportHandler = (trx: Trx, event: { work: AgentWork; report: AgentWorkReport }) => Promise<void>;

const reportHandlers = new Map<string, AgentWorkReportHandler>();

/** Lets the area that hands out work of `kind` follow what the agent reports about it. */
export function onAgentWorkReport(kind: string, handler: AgentWorkReportHandler): void {
  reportHandlers.set(kind, handler);
}

/** Wakes the polls of an agent waiting in this process when work is added for it. */
const arrivals = new EventEmitter().setMaxListeners(0);

/** Adds work for an agent; pass the transaction of the write it belongs to so that both land or neither does. */
export async function enqueueAgentWork(
  db: Executor,
  work: { accountId: string; agentId: string; kind: string; payload: unknown },
): Promise<string> {
  const id = randomUUID();
  await db
    .insertInto('agentWork')
    .values({
      id,
      accountId: work.accountId,
      agentId: work.agentId,
      kind: work.kind,
      payload: JSON.stringify(work.payload ?? null),
      state: 'PENDING',
      cancelRequested: 0,
      deliveries: 0,
      leaseUntil: null,
      result: null,
      createdAt: now(),
      finishedAt: null,
    })
    .execute();
  // Told after the caller's transaction has had a moment to commit; a poll that misses it looks again soon.
  setImmediate(() => arrivals.emit(work.agentId));
  return id;
}

/**
 * Asks for work to stop. Work no poll has taken is cancelled at once (and its payload dropped); delivered
 * work is marked, and its agent learns it from its next poll or heartbeat. Answers the work's state.
 */
export async function cancelAgentWork(db: Executor, workId: string): Promise<AgentWorkState> {
  const cancelled = await db
    .updateTable('agentWork')
    .set({ state: 'CANCELLED', payload: null, cancelRequested: 1, finishedAt: now() })
    .where('id', '=', workId)
    .where('state', '=', 'PENDING')
    .executeTakeFirst();
  if (Number(cancelled.numUpdatedRows) > 0) return 'CANCELLED';
  await db
    .updateTable('agentWork')
    .set({ cancelRequested: 1 })
    .where('id', '=', workId)
    .where('state', '=', 'DELIVERED')
    .execute();
  const row = await db.selectFrom('agentWork').select('state').where('id', '=', workId).executeTakeFirst();
  if (!row) throw notFound(`There is no agent work ${workId}.`);
  return row.state as AgentWorkState;
}

export function readAgentWork(db: Executor, workId: string): Promise<AgentWork | undefined> {
  return db.selectFrom('agentWork').selectAll().where('id', '=', workId).executeTakeFirst();
}

/** Takes up to `max` pieces of the agent's work that are pending or whose lease lapsed, leasing them to the caller. */
export async function claimAgentWork(
  store: Pick<Store, 'db' | 'dialect'>,
  agentId: string,
  leaseSeconds: number,
  max: number,
): Promise<AgentWork[]> {
  const at = now();
  const leaseUntil = new Date(Date.now() + leaseSeconds * 1000).toISOString();
  const claimable = (eb: any) =>
    eb.or([eb('state', '=', 'PENDING'), eb.and([eb('state', '=', 'DELIVERED'), eb('leaseUntil', '<', at)])]);
  const due = store.db
    .selectFrom('agentWork')
    .select('id')
    .where('agentId', '=', agentId)
    .where(claimable)
    .orderBy('seq')
    .limit(max);
  return (
    store.db
      .updateTable('agentWork')
      .set((eb) => ({ state: 'DELIVERED', leaseUntil, deliveries: eb('deliveries', '+', 1) }))
      .where('id', 'in', store.dialect === 'postgres' ? due.forUpdate().skipLocked() : due)
      // Re-checked on the row itself, so that two polls racing for it cannot both take it.
      .where(claimable)
      .returningAll()
      .execute()
      .then((rows) => rows.sort((a, b) => a.seq - b.seq))
  );
}

/**
 * Waits up to `waitMs` for work of the agent and takes it; answers at once when there is some. Work
 * added in this process wakes the wait; work added by another process is found by looking every 250 ms.
 */
export async function pollAgentWork(
  store: Pick<Store, 'db' | 'dialect'>,
  agentId: string,
  options: { leaseSeconds: number; max: number; waitMs: number; signal: AbortSignal },
): Promise<AgentWork[]> {
  const deadline = Date.now() + options.waitMs;
  for (;;) {
    const work = await claimAgentWork(store, agentId, options.leaseSeconds, options.max);
    const left = deadline - Date.now();
    if (work.length > 0 || left <= 0 || options.signal.aborted) return work;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        arrivals.off(agentId, done);
        options.signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, Math.min(250, left));
      arrivals.on(agentId, done);
      options.signal.addEventListener('abort', done);
    });
  }
}

/** The agent still works on these: their leases run on. Answers which of the agent's work is to be cancelled. */
export async function renewAgentWork(db: Executor, agentId: string, workIds: string[], leaseSeconds: number): Promise<string[]> {
  if (workIds.length > 0) {
    await db
      .updateTable('agentWork')
      .set({ leaseUntil: new Date(Date.now() + leaseSeconds * 1000).toISOString() })
      .where('agentId', '=', agentId)
      .where('state', '=', 'DELIVERED')
      .where('id', 'in', workIds)
      .execute();
  }
  const cancelled = await db
    .selectFrom('agentWork')
    .select('id')
    .where('agentId', '=', agentId)
    .where('state', '=', 'DELIVERED')
    .where('cancelRequested', '=', 1)
    .execute();
  return cancelled.map((row) => row.id);
}

/**
 * Records an agent's report about its work and lets the area of the work's kind act on it in the same
 * transaction. Progress is taken while the work is delivered; the final report (done or failed) is taken
 * once: a second one is 409, whatever it says. Finishing drops the payload.
 */
export async function reportAgentWork(trx: Trx, agentId: string, workId: string, report: AgentWorkReport): Promise<AgentWork> {
  const work = await trx
    .selectFrom('agentWork')
    .selectAll()
    .where('id', '=', workId)
    .where('agentId', '=', agentId)
    .executeTakeFirst();
  if (!work) throw notFound(`There is no work ${workId} for this agent.`);
  const open = ['PENDING', 'DELIVERED'];
  if (report.type !== 'progress') {
    const state = work.cancelRequested && report.type === 'failed' ? 'CANCELLED' : report.type === 'done' ? 'DONE' : 'FAILED';
    // Conditional on the row itself, so that of two final reports racing only one is taken.
    const finished = await trx
      .updateTable('agentWork')
      .set({ state, payload: null, result: JSON.stringify(report.body), finishedAt: now(), leaseUntil: null })
      .where('id', '=', workId)
      .where('state', 'in', open)
      .executeTakeFirst();
    if (Number(finished.numUpdatedRows) === 0) work.state = 'FINISHED';
  }
  if (!open.includes(work.state)) throw conflict(`Work ${workId} is finished; its final report was already taken.`);
  await reportHandlers.get(work.kind)?.(trx, { work, report });
  return work;
}
