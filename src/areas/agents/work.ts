/**
 * Work the server hands to an agent, kept in the store (`agent_work`) so that it survives restarts and
 * is shared by every server instance. Delivered at least once (a delivery is leased; when the lease
 * lapses without a final report, the next poll gets it again), finished exactly once (the first final
 * report wins; any later report is refused with 409), one delivery per poll across instances.
 *
 * Other areas use enqueueAgentWork, cancelAgentWork and `app.agentWorkReports` (work-reports.ts); the agent protocol routes
 * (routes.ts) use the rest.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { sql, type ExpressionBuilder } from 'kysely';
import type { Db, Dialect, Executor } from '../../core/db/database.ts';
import { now, statementsAreRoundTrips } from '../../core/db/database.ts';
import type { Database } from '../../core/db/schema.ts';
import { ProblemError, notFound } from '../../core/problems.ts';
import type { AgentWorkTable } from './tables.ts';

export type AgentWorkState = 'queued' | 'delivered' | 'done' | 'failed' | 'cancelled';

export interface AgentWork {
  id: string;
  accountId: string;
  agentId: string;
  kind: string;
  /** Null once the work is finished or cancelled. */
  payload: unknown;
  state: AgentWorkState;
  deliveries: number;
  cancelRequested: boolean;
  /** The body of the final report, once there is one. */
  result: unknown;
  /** The highest report sequence recorded for the current delivery (0: none). */
  reportSequence: number;
  createdAt: string;
  finishedAt: string | null;
}

export interface AgentReport {
  type: 'progress' | 'done' | 'failed';
  body: unknown;
  /** The delivery the report is about (the `delivery` of the poll answer); a report of an earlier one is refused. */
  delivery?: number;
  /** Counts the reports of one delivery from 1; a report at or below the highest recorded is a repeat. */
  sequence?: number;
}

/**
 * Runs inside the transaction that records the report, so an area's own rows move with it. `work.payload`
 * is the payload as delivered (the row itself drops it once the work is finished). Registered with
 * `app.agentWorkReports` (work-reports.ts).
 */
export type AgentWorkReportHandler = (executor: Executor, event: { work: AgentWork; report: AgentReport }) => Promise<void>;

function toWork(row: AgentWorkTable): AgentWork {
  return {
    id: row.id,
    accountId: row.accountId,
    agentId: row.agentId,
    kind: row.kind,
    payload: row.payload === null ? null : JSON.parse(row.payload),
    state: row.state as AgentWorkState,
    deliveries: Number(row.deliveries),
    cancelRequested: Number(row.cancelRequested) === 1,
    result: row.result === null ? null : JSON.parse(row.result),
    reportSequence: Number(row.reportSequence),
    createdAt: row.createdAt,
    finishedAt: row.finishedAt,
  };
}

/** The PostgreSQL channel a transaction that queues work notifies (its payload: the agent id) when it commits. */
export const AGENT_WORK_CHANNEL = 'dpc_agent_work';

/**
 * Told (in this process) the agents just given work: the wake-up of waiting polls on SQLite, which has no
 * NOTIFY. It may fire before the work commits; a poll's claim then waits for the write's turn on SQLite's one
 * connection, which commits it first (group-commit.ts), or finds nothing and waits for its next look.
 */
export const queuedWork = new EventEmitter().setMaxListeners(0);

/**
 * Queues work for an agent; pass the transaction of the write it belongs to. Answers the work id. The
 * agent's waiting polls are woken when the transaction commits (AGENT_WORK_CHANNEL, queuedWork), so work
 * goes out at once rather than at a poll's next look.
 */
export async function enqueueAgentWork(
  executor: Executor,
  work: { accountId: string; agentId: string; kind: string; payload: unknown },
): Promise<string> {
  const id = randomUUID();
  await executor
    .insertInto('agentWork')
    .values({
      id,
      accountId: work.accountId,
      agentId: work.agentId,
      kind: work.kind,
      payload: JSON.stringify(work.payload ?? null),
      state: 'queued',
      deliveries: 0,
      reportSequence: 0,
      leasedUntil: null,
      cancelRequested: 0,
      result: null,
      createdAt: now(),
      finishedAt: null,
    })
    .execute();
  if (statementsAreRoundTrips(executor)) await sql`select pg_notify(${AGENT_WORK_CHANNEL}, ${work.agentId})`.execute(executor);
  else setImmediate(() => queuedWork.emit('emitted', [work.agentId]));
  return id;
}

/**
 * Cancels work: queued work is never delivered ('cancelled'); delivered work is marked so that the agent
 * learns it on its next heartbeat or report ('cancel-requested'), and is not delivered again. Either way
 * its payload is dropped. Finished work is left as it is ('finished'); an unknown id is 'unknown'.
 */
export async function cancelAgentWork(
  executor: Executor,
  workId: string,
): Promise<'cancelled' | 'cancel-requested' | 'finished' | 'unknown'> {
  const queued = await executor
    .updateTable('agentWork')
    .set({ state: 'cancelled', payload: null, finishedAt: now() })
    .where('id', '=', workId)
    .where('state', '=', 'queued')
    .executeTakeFirst();
  if (queued.numUpdatedRows > 0n) return 'cancelled';
  const delivered = await executor
    .updateTable('agentWork')
    .set({ cancelRequested: 1, payload: null })
    .where('id', '=', workId)
    .where('state', '=', 'delivered')
    .executeTakeFirst();
  if (delivered.numUpdatedRows > 0n) return 'cancel-requested';
  const row = await executor.selectFrom('agentWork').select('id').where('id', '=', workId).executeTakeFirst();
  return row ? 'finished' : 'unknown';
}

/** The work `workId`, or undefined. */
export async function findAgentWork(executor: Executor, workId: string): Promise<AgentWork | undefined> {
  const row = await executor.selectFrom('agentWork').selectAll().where('id', '=', workId).executeTakeFirst();
  return row && toWork(row);
}

/**
 * Hands the agent its oldest due work, leased for `leaseMs`: queued work, or delivered work whose lease
 * lapsed (the agent died holding it). One piece to one caller: on PostgreSQL the candidate row is locked
 * with SKIP LOCKED, and the update re-checks the row's state, so two instances racing cannot both win; on
 * SQLite writes are serialised. Cancelled work whose holder vanished is closed here rather than delivered.
 */
export async function claimAgentWork(db: Db, dialect: Dialect, agentId: string, leaseMs: number): Promise<AgentWork | undefined> {
  const at = now();
  await db
    .updateTable('agentWork')
    .set({ state: 'cancelled', finishedAt: at })
    .where('agentId', '=', agentId)
    .where('state', '=', 'delivered')
    .where('cancelRequested', '=', 1)
    .where('leasedUntil', '<', at)
    .execute();
  const due = (eb: ExpressionBuilder<Database, 'agentWork'>) =>
    eb.or([eb('state', '=', 'queued'), eb.and([eb('state', '=', 'delivered'), eb('leasedUntil', '<', at)])]);
  const candidate = db
    .selectFrom('agentWork')
    .select('id')
    .where('agentId', '=', agentId)
    .where('cancelRequested', '=', 0)
    .where(due)
    .orderBy('createdAt')
    .limit(1);
  const claimed = await db
    .updateTable('agentWork')
    .set((eb) => ({
      state: 'delivered',
      leasedUntil: new Date(Date.now() + leaseMs).toISOString(),
      deliveries: eb('deliveries', '+', 1),
      reportSequence: 0,
    }))
    .where('id', '=', dialect === 'postgres' ? candidate.forUpdate().skipLocked() : candidate)
    .where('cancelRequested', '=', 0)
    .where(due)
    .returningAll()
    .executeTakeFirst();
  return claimed && toWork(claimed);
}

/** A piece of work an agent says it holds: the delivery it runs, when it says (agents that do not name it hold "the work"). */
export interface HeldWork {
  workId: string;
  delivery?: number;
}

/** Why held work is no longer the holder's to run. */
export type EndedReason = 'cancelled' | 'finished' | 'redelivered' | 'unknown';

/**
 * Extends the leases of the delivered work an agent says it still holds (of the delivery it names: a stale
 * delivery renews nothing), and answers which of it is no longer the agent's to run, so that it stops:
 * `cancelledWorkIds` (cancelled since), and `endedWork`, each held delivery that was cancelled, has been
 * finished (by a final report, of this delivery or another), was delivered again since (its lease lapsed), or
 * is not known at all.
 */
export async function renewAgentWork(
  db: Db,
  agentId: string,
  held: HeldWork[],
  leaseMs: number,
): Promise<{ cancelledWorkIds: string[]; endedWork: { workId: string; delivery: number | null; reason: EndedReason }[] }> {
  if (held.length === 0) return { cancelledWorkIds: [], endedWork: [] };
  const ids = [...new Set(held.map((work) => work.workId))];
  const rows = await db
    .selectFrom('agentWork')
    .select(['id', 'state', 'deliveries', 'cancelRequested'])
    .where('agentId', '=', agentId)
    .where('id', 'in', ids)
    .execute();
  const byId = new Map(rows.map((row) => [row.id, row]));
  // Renewed: delivered work held at its current delivery (or by an agent that does not say which).
  const renewed = [
    ...new Set(
      held
        .filter((work) => {
          const row = byId.get(work.workId);
          return row && row.state === 'delivered' && (work.delivery === undefined || work.delivery === Number(row.deliveries));
        })
        .map((work) => work.workId),
    ),
  ];
  if (renewed.length > 0) {
    await db
      .updateTable('agentWork')
      .set({ leasedUntil: new Date(Date.now() + leaseMs).toISOString() })
      .where('agentId', '=', agentId)
      .where('id', 'in', renewed)
      .where('state', '=', 'delivered')
      .execute();
  }
  const cancelled = (row: (typeof rows)[number]) => Number(row.cancelRequested) === 1 || row.state === 'cancelled';
  const endedWork = held.flatMap((work) => {
    const row = byId.get(work.workId);
    const reason: EndedReason | undefined = !row
      ? 'unknown'
      : cancelled(row)
        ? 'cancelled'
        : row.state === 'done' || row.state === 'failed'
          ? 'finished'
          : work.delivery !== undefined && work.delivery !== Number(row.deliveries)
            ? 'redelivered'
            : undefined;
    return reason ? [{ workId: work.workId, delivery: work.delivery ?? null, reason }] : [];
  });
  return { cancelledWorkIds: ids.filter((id) => byId.has(id) && cancelled(byId.get(id)!)), endedWork };
}

const finishedProblem = (work: AgentWork) =>
  new ProblemError(
    409,
    work.state === 'cancelled' || work.cancelRequested
      ? `Work ${work.id} was cancelled; stop it and report nothing more.`
      : `Work ${work.id} is already ${work.state}; its final report was recorded once and this one is ignored.`,
    { name: work.state === 'cancelled' || work.cancelRequested ? 'work-cancelled' : 'work-already-finished' },
  );

/**
 * Records an agent's report on its work, and runs the kind's report handler in the same transaction.
 * progress keeps the lease alive; done or failed finishes the work once (the first final report wins;
 * later ones, and any report on cancelled or finished work, answer 409), drops its payload and keeps the
 * report body as the result. A final report on work whose cancellation was requested still finishes it.
 *
 * Agents retry a report whose answer they did not get, so a report may come twice. One that names its
 * `delivery` and `sequence` is idempotent: a sequence at or below the highest recorded for the delivery is
 * answered as recorded (a progress report renews the lease) and applied no second time, also once the work
 * is finished; a report of an earlier delivery (its lease lapsed and the work was delivered again) is 409
 * `work-redelivered`, and one of a later delivery than there has been 409 `work-delivery-unknown`.
 */
export function recordAgentWorkReport(
  db: Db,
  agentId: string,
  workId: string,
  report: AgentReport,
  leaseMs: number,
  handlers: { handlerOf(kind: string): AgentWorkReportHandler },
): Promise<AgentWork> {
  return db.transaction().execute(async (trx) => {
    const current = await findAgentWork(trx, workId);
    if (!current || current.agentId !== agentId) throw notFound(`Work ${workId} is not this agent's.`);
    if (current.state === 'queued') {
      throw new ProblemError(409, `Work ${workId} has not been delivered; poll for it first.`, { name: 'work-not-delivered' });
    }
    if (report.delivery !== undefined && report.delivery > current.deliveries) {
      throw new ProblemError(
        409,
        `Work ${workId} has had ${current.deliveries} deliveries; delivery ${report.delivery} does not exist, so this report is not taken.`,
        { name: 'work-delivery-unknown' },
      );
    }
    if (report.delivery !== undefined && report.delivery !== current.deliveries) {
      throw new ProblemError(
        409,
        `Work ${workId} was delivered again (delivery ${current.deliveries}) after the lease of delivery ${report.delivery} lapsed; report nothing more on that delivery.`,
        { name: 'work-redelivered' },
      );
    }
    if (report.sequence !== undefined && report.sequence <= current.reportSequence) {
      // A repeat: its first copy was recorded, only the answer was lost on the way.
      if (report.type === 'progress' && current.state === 'delivered') {
        await trx
          .updateTable('agentWork')
          .set({ leasedUntil: new Date(Date.now() + leaseMs).toISOString() })
          .where('id', '=', workId)
          .where('state', '=', 'delivered')
          .execute();
      }
      return current;
    }
    const sequence = report.sequence ?? current.reportSequence;
    const at = now();
    // The sequence is checked again by the update itself: two reports of one delivery read the row at once
    // (PostgreSQL, read committed), and the one that waits for the other's row lock sees its sequence then.
    const moved =
      report.type === 'progress'
        ? await trx
            .updateTable('agentWork')
            .set({ leasedUntil: new Date(Date.now() + leaseMs).toISOString(), reportSequence: sequence })
            .where('id', '=', workId)
            .where('state', '=', 'delivered')
            .where('cancelRequested', '=', 0)
            .$if(report.sequence !== undefined, (update) => update.where('reportSequence', '<', sequence))
            .returningAll()
            .executeTakeFirst()
        : await trx
            .updateTable('agentWork')
            .set({
              state: report.type,
              payload: null,
              leasedUntil: null,
              result: JSON.stringify(report.body ?? null),
              finishedAt: at,
              reportSequence: sequence,
            })
            .where('id', '=', workId)
            .where('state', '=', 'delivered')
            .$if(report.sequence !== undefined, (update) => update.where('reportSequence', '<', sequence))
            .returningAll()
            .executeTakeFirst();
    if (!moved) {
      const latest = (await findAgentWork(trx, workId))!;
      // Overtaken by a later report of the same delivery recorded meanwhile: a repeat, as above.
      if (report.sequence !== undefined && report.sequence <= latest.reportSequence) return latest;
      throw finishedProblem(latest);
    }
    // The handler sees the payload as delivered, although the row no longer keeps it.
    const work = { ...toWork(moved), payload: current.payload };
    await handlers.handlerOf(work.kind)(trx, { work, report });
    return work;
  });
}

/** Which of `workIds` are cancelled work (closed without a final report). */
export async function cancelledWorkIds(db: Executor, workIds: readonly string[]): Promise<Set<string>> {
  if (workIds.length === 0) return new Set();
  const rows = await db
    .selectFrom('agentWork')
    .select('id')
    .where('id', 'in', [...new Set(workIds)])
    .where('state', '=', 'cancelled')
    .execute();
  return new Set(rows.map((row) => row.id));
}

/** Which of `workIds` no longer exist (their agent was deleted with its work). */
export async function goneWorkIds(db: Executor, workIds: readonly string[]): Promise<Set<string>> {
  const ids = [...new Set(workIds)];
  if (ids.length === 0) return new Set();
  const rows = await db.selectFrom('agentWork').select('id').where('id', 'in', ids).execute();
  const found = new Set(rows.map((row) => row.id));
  return new Set(ids.filter((id) => !found.has(id)));
}

/** The work of `kinds` an agent has not finished (queued or delivered), with its payload. */
export async function unfinishedWorkOf(db: Executor, agentId: string, kinds: readonly string[]) {
  const rows = await db
    .selectFrom('agentWork')
    .select(['id', 'payload'])
    .where('agentId', '=', agentId)
    .where('kind', 'in', [...kinds])
    .where('state', 'in', ['queued', 'delivered'])
    .execute();
  return rows.map((row) => ({ id: row.id, payload: row.payload === null ? null : (JSON.parse(row.payload) as unknown) }));
}
