/**
 * Pushing lineage to an OpenLineage HTTP endpoint (DPC_OPENLINEAGE_URL: Marquez's `/api/v1/lineage`, a
 * catalogue's): each stored event is a durable job, queued in the transaction that stores the event (both
 * land or neither does), that POSTs the event through the outbound client (address rules, deadline). A
 * 2xx answer ends it; anything else fails the try, and the job queue tries again with its backoff (1 s
 * doubling to 60 s) up to DPC_OPENLINEAGE_ATTEMPTS tries. At least once: a process that dies while
 * sending leaves the job to be taken over, and the endpoint may get the event twice (OpenLineage
 * consumers take an event again as the same). Without the setting nothing is queued.
 */
import type { FastifyInstance } from 'fastify';
import type { Executor } from '../../core/db/database.ts';
import { OutboundClient, outboundSettings } from '../../core/outbound.ts';
import type { JobQueue } from '../../core/jobs.ts';
import { lineageStepById } from './repository.ts';
import type { StepLineage } from '../../contract/lineage.ts';

export const PUSH_JOB = 'lineage-push';

interface Push {
  jobs: JobQueue;
  attempts: number;
}

/** The push of each store (tests run several servers in one process); keyed as preparedQuery keys a store. */
const pushes = new WeakMap<object, Push>();
/** A store's key for per-store state, the same from a transaction of it: its Kysely adapter. */
export const storeKey = (db: Executor): object => db.getExecutor().adapter;

/**
 * Sets up the push when DPC_OPENLINEAGE_URL is set: events stored from now on are queued, and (in a
 * process that runs jobs) sent. `eventOf` builds an event from its stored row.
 */
export function startLineagePush(
  app: FastifyInstance,
  eventOf: (row: NonNullable<Awaited<ReturnType<typeof lineageStepById>>>, lineage: StepLineage) => unknown,
): void {
  const url = app.config.openLineageUrl;
  if (!url) return;
  pushes.set(storeKey(app.store.db), { jobs: app.jobs, attempts: app.config.openLineageAttempts });
  if (!app.config.runJobs) return;
  const outbound = new OutboundClient(outboundSettings(app.config));
  app.jobs.register(PUSH_JOB, async (payload) => {
    // A stored event by id, built when sent; or an event that has no row (a run ended by its project's deletion).
    const job = payload as { id: number } | { event: unknown };
    let event: unknown;
    if ('event' in job) event = job.event;
    else {
      const row = await lineageStepById(app.store.db, job.id);
      if (!row) return; // deleted with its project
      event = eventOf(row, JSON.parse(row.body) as StepLineage);
    }
    const answer = await outbound.send({
      method: 'POST',
      url,
      headers: { 'content-type': 'application/json', 'user-agent': 'platform-api-openlineage/1' },
      body: JSON.stringify(event),
    });
    if (answer.status < 200 || answer.status >= 300) {
      throw new Error(`The OpenLineage endpoint answered ${answer.status}: ${answer.body.toString('utf8').slice(0, 200)}`);
    }
  });
}

/** Whether events stored in `db` are pushed (their ids are needed to queue them). */
export function pushesFrom(db: Executor): boolean {
  return pushes.has(storeKey(db));
}

/** Queues the push of stored event `id`, in the transaction that stored it; nothing without DPC_OPENLINEAGE_URL. */
export async function queuePush(db: Executor, id: number): Promise<void> {
  const push = pushes.get(storeKey(db));
  if (push) await push.jobs.enqueue(db, PUSH_JOB, { id }, { maxAttempts: push.attempts });
}

/**
 * Queues the push of stored events `ids` (the child runs a run's end ended, in one statement), each a job of its
 * own as queuePush queues it (tried, and given up, on its own), their rows written in as few statements as can be.
 */
export async function queuePushes(db: Executor, ids: number[]): Promise<void> {
  const push = pushes.get(storeKey(db));
  if (push)
    await push.jobs.enqueueEach(
      db,
      PUSH_JOB,
      ids.map((id) => ({ id })),
      { maxAttempts: push.attempts },
    );
}

/**
 * Queues the push of `events` that are not stored (the ends of runs whose project is being deleted, which takes
 * their rows): each a job of its own carrying the event, in the caller's transaction; nothing without
 * DPC_OPENLINEAGE_URL.
 */
export async function queueEventPushes(db: Executor, events: unknown[]): Promise<void> {
  const push = pushes.get(storeKey(db));
  if (push && events.length > 0)
    await push.jobs.enqueueEach(
      db,
      PUSH_JOB,
      events.map((event) => ({ event })),
      { maxAttempts: push.attempts },
    );
}
