import { sql, type ExpressionBuilder } from 'kysely';
import type { Db, Executor, Trx } from '../../core/db/database.ts';
import { dialectOf, statementsAreRoundTrips } from '../../core/db/database.ts';
import { preparedQuery } from '../../core/db/prepared.ts';
import { deferInsertOnSqlite, type DeferredInsert } from '../../core/db/group-commit.ts';
import { countOf, pageWindow, type PageQuery } from '../../core/paging.ts';
import type { Database } from '../../core/db/schema.ts';
import type { LineageBodyTable, LineageStepTable } from './tables.ts';
import { windowPieces, type WindowPiece } from './days.ts';

export type LineageStepRow = Omit<LineageStepTable, 'id'>;

const stepValues = (step: LineageStepRow) => ({
  accountId: step.accountId,
  projectId: step.projectId,
  executionId: step.executionId,
  generatedAt: step.generatedAt,
  eventTime: step.eventTime,
  jobName: step.jobName,
  jobKind: step.jobKind,
  stepIndex: step.stepIndex,
  stepName: step.stepName,
  stepStatus: step.stepStatus,
  bodyHash: step.bodyHash,
  runId: step.runId,
  parent: step.parent,
  runPhase: step.runPhase,
});

/**
 * Bodies known to be in the store, by project: seen committed by this process (a step reports the same body
 * run after run, and a body stays while its project does). A step whose body is known is written without
 * it: the body's ~1 KB is neither sent nor looked up again. Learnt only once certain: on SQLite when the
 * group that wrote it has committed (BODY_ROWS.committed); on PostgreSQL when inserting it found it there
 * and the transaction had not inserted it itself (an insert `on conflict do nothing` that meets a row of a
 * transaction in progress waits for its end: it meets only committed rows, or its own transaction's).
 * Forgotten with the project's deletion in this process; another process's deletion leaves an entry that no
 * step can use (the project's runs are gone with it, and its ids are never used again). And taken as known
 * for KNOWN_FOR_MS after it was last seen stored, then sent again (once per body and 5 s): PostgreSQL can
 * lose a commit this process saw (a failover to a standby that had not received it, a restore from a
 * backup), and a step written without its body then would have no event; a look whether the body is there
 * with every step costs a subquery's planning (bench/lineage.ts: +3 points on PostgreSQL), this at most 5 s
 * of steps after such a loss.
 */
const knownBodies = new Map<string, Map<string, number>>();
let knownCount = 0;
const KNOWN_BODIES_KEPT = 20_000;
/** How long a body is taken as stored after it was last seen so: the longest a lost commit can go unnoticed. */
const KNOWN_FOR_MS = 5000;

const isKnown = (projectId: string, hash: string) => {
  const knownAt = knownBodies.get(projectId)?.get(hash);
  return knownAt !== undefined && Date.now() - knownAt < KNOWN_FOR_MS;
};

function know(projectId: string, hash: string): void {
  let hashes = knownBodies.get(projectId);
  if (knownCount >= KNOWN_BODIES_KEPT) {
    knownBodies.clear();
    knownCount = 0;
    hashes = undefined;
  }
  if (!hashes) knownBodies.set(projectId, (hashes = new Map()));
  if (!hashes.has(hash)) knownCount += 1;
  hashes.set(hash, Date.now());
}

/** PostgreSQL: the bodies each open transaction inserted itself (not committed before it ends: see knownBodies). */
const insertedBy = new WeakMap<Executor, Set<string>>();

/** The body unless the project has it already (each statement compiled once). */
const insertBody = preparedQuery((db, body: Pick<LineageBodyTable, keyof LineageBodyTable>) =>
  db
    .insertInto('lineageBodies')
    .values({ projectId: body.projectId, hash: body.hash, body: body.body })
    .onConflict((oc) => oc.columns(['projectId', 'hash']).doNothing()),
);

/** The step (on SQLite after its body: SQLite has no writable WITH, and a statement there is a call, not a round trip; alone where the body is known). */
const insertStep = preparedQuery((db, step: LineageStepRow) =>
  db.insertInto('lineageSteps').values(stepValues(step)).returning('id'),
);

/**
 * PostgreSQL: the body (unless the project has it) and the step in one statement, one round trip; answers
 * whether the body was inserted.
 */
const insertBodyAndStep = preparedQuery((db, row: LineageStepRow & { body: string }) =>
  db
    .with('body', (qb) =>
      qb
        .insertInto('lineageBodies')
        .values({ projectId: row.projectId, hash: row.bodyHash, body: row.body })
        .onConflict((oc) => oc.columns(['projectId', 'hash']).doNothing())
        .returning('hash'),
    )
    .insertInto('lineageSteps')
    .values(stepValues(row))
    .returning((eb) => [
      'id',
      eb
        .selectFrom('body')
        .select((b) => b.fn.countAll<string>().as('n'))
        .as('bodiesInserted'),
    ]),
);

/** Records a step's lineage: its row, and its body unless the project has that body already; answers the row's id. */
export async function insertLineageStep(db: Executor, step: LineageStepRow, body: string): Promise<number> {
  if (isKnown(step.projectId, step.bodyHash)) {
    const [row] = await insertStep(db, step);
    return Number(row.id);
  }
  if (statementsAreRoundTrips(db)) {
    const [row] = await insertBodyAndStep(db, { ...step, body });
    noteBody(db, step.projectId, step.bodyHash, Number(row.bodiesInserted) > 0);
    return Number(row.id);
  }
  await insertBody(db, { projectId: step.projectId, hash: step.bodyHash, body });
  const [row] = await insertStep(db, step);
  return Number(row.id);
}

/** SQLite: a step's body and row as handed to its transaction's group commit (addLineageStep). */
const BODY_ROWS: DeferredInsert = {
  into: 'insert into lineage_bodies (project_id, hash, body)',
  columns: 3,
  // Not for a project a later transaction of the group deleted (with its lineage, before these were written).
  where: 'exists (select 1 from projects p where p.id = column1)',
  then: 'on conflict (project_id, hash) do nothing',
  // A group's runs of one pipeline report the same bodies: each is sent once.
  key: 2,
  // And once committed, not again (knownBodies).
  committed: (rows) => {
    for (const row of rows) know(row[0] as string, row[1] as string);
  },
};
const STEP_ROWS: DeferredInsert = {
  into:
    'insert into lineage_steps (account_id, project_id, execution_id, generated_at, event_time, job_name, job_kind, ' +
    'step_index, step_name, step_status, body_hash, run_id, parent)',
  columns: 13,
  where: 'exists (select 1 from projects p where p.id = column2)',
};

/**
 * Records a step's lineage as insertLineageStep does, without answering its id. In a SQLite transaction the
 * body and row go to its group's commit (db/group-commit.ts), written there with the group's others, one
 * statement for the bodies and one for the rows: a report's transaction runs no statement for its lineage.
 */
export async function addLineageStep(db: Executor, step: LineageStepRow, body: string): Promise<void> {
  if (db.isTransaction && !statementsAreRoundTrips(db)) {
    const adapter = db.getExecutor().adapter;
    if (
      isKnown(step.projectId, step.bodyHash) ||
      deferInsertOnSqlite(adapter, BODY_ROWS, [step.projectId, step.bodyHash, body])
    ) {
      const deferred = deferInsertOnSqlite(adapter, STEP_ROWS, [
        step.accountId,
        step.projectId,
        step.executionId,
        step.generatedAt,
        step.eventTime,
        step.jobName,
        step.jobKind,
        step.stepIndex,
        step.stepName,
        step.stepStatus,
        step.bodyHash,
        step.runId,
        step.parent,
      ]);
      if (deferred) return;
    }
  }
  await insertLineageStep(db, step, body);
}

/**
 * Records a run-level event (job kind RUN: a run's START or END) with its body, unless the run has that phase
 * already (the partial unique index of migration 0046); answers the row's id, or undefined when it had. Not
 * handed to SQLite's group commit: a step naming its child run and a run's end read these rows, and a row
 * deferred to the commit of an earlier transaction of the group would not be there yet.
 */
export async function insertRunEvent(db: Executor, row: LineageStepRow, body: string): Promise<number | undefined> {
  if (!isKnown(row.projectId, row.bodyHash)) await addBody(db, row.projectId, row.bodyHash, body);
  const [inserted] = await insertRunRow(db, row);
  return inserted === undefined ? undefined : Number(inserted.id);
}

/** PostgreSQL: the body unless the project has it, answering whether it was inserted. */
const insertBodyAnswering = preparedQuery((db, body: Pick<LineageBodyTable, keyof LineageBodyTable>) =>
  db
    .insertInto('lineageBodies')
    .values({ projectId: body.projectId, hash: body.hash, body: body.body })
    .onConflict((oc) => oc.columns(['projectId', 'hash']).doNothing())
    .returning('hash'),
);

/**
 * A body not known to be stored (knownBodies): on SQLite in a transaction handed to its group's commit (known
 * once that commits), else inserted unless the project has it (on PostgreSQL known once met committed).
 */
async function addBody(db: Executor, projectId: string, hash: string, body: string): Promise<void> {
  if (!statementsAreRoundTrips(db)) {
    if (db.isTransaction && deferInsertOnSqlite(db.getExecutor().adapter, BODY_ROWS, [projectId, hash, body])) return;
    await insertBody(db, { projectId, hash, body });
    return;
  }
  const inserted = (await insertBodyAnswering(db, { projectId, hash, body })).length > 0;
  noteBody(db, projectId, hash, inserted);
}

/**
 * PostgreSQL: what inserting a body (`on conflict do nothing`) found: known at once outside a transaction;
 * in one, known when it met the body there and had not inserted it itself (a row it meets is committed, or its own).
 */
function noteBody(db: Executor, projectId: string, hash: string, inserted: boolean): void {
  const key = `${projectId} ${hash}`;
  let mine = insertedBy.get(db);
  if (!db.isTransaction) {
    know(projectId, hash);
  } else if (inserted) {
    if (!mine) insertedBy.set(db, (mine = new Set()));
    mine.add(key);
  } else if (!mine?.has(key)) {
    know(projectId, hash);
  }
}

/** The partial unique index's target, its predicate written out (a bound value would not be known to match it). */
const RUN_EVENT_KEY = ['executionId', 'runId', 'runPhase'] as const;

const insertRunRow = preparedQuery((db, row: LineageStepRow) =>
  db
    .insertInto('lineageSteps')
    .values(stepValues(row))
    .onConflict((oc) => oc.columns(RUN_EVENT_KEY).where('jobKind', '=', sql.lit('RUN')).doNothing())
    .returning('id'),
);

/** Of a run's START row `s`: its run has no END yet. */
function notEnded({ not, exists, selectFrom }: ExpressionBuilder<Database & { s: LineageStepTable }, 's'>) {
  return not(
    exists(
      selectFrom('lineageSteps as e')
        .select('e.id')
        .whereRef('e.executionId', '=', 's.executionId')
        .whereRef('e.runId', '=', 's.runId')
        .where('e.runPhase', '=', sql.lit('END'))
        .where('e.jobKind', '=', sql.lit('RUN')),
    ),
  );
}

/**
 * Ends, in one statement, every run of the execution other than its own that has a START and no END, with
 * `eventType` at `at` (server time); answers the ids of the rows written.
 */
export async function endOpenChildRuns(db: Executor, executionId: string, eventType: string, at: string): Promise<number[]> {
  const rows = await endOpenRuns(db, { executionId, eventType, at });
  return rows.map((row) => Number(row.id));
}

/**
 * Ends COMPLETE, in one statement, the open runs of the execution's test pipelines (the runs keyed by their
 * pipeline: no step ran them) other than `failed`; answers the ids of the rows written.
 */
export async function endPassedTestRuns(db: Executor, executionId: string, failed: string[], at: string): Promise<number[]> {
  const rows = await endingOpenRuns(db, { executionId, eventType: 'COMPLETE', at }, { failed }).execute();
  return rows.map((row) => Number(row.id));
}

const endOpenRuns = preparedQuery((db, run: { executionId: string; eventType: string; at: string }) => endingOpenRuns(db, run));

/** The END of each open run of the execution but its own; with `passed`, only its test pipelines' runs not failed. */
function endingOpenRuns(
  db: Executor,
  run: { executionId: string; eventType: string; at: string },
  passed?: { failed: string[] },
) {
  return db
    .insertInto('lineageSteps')
    .columns([
      'accountId',
      'projectId',
      'executionId',
      'generatedAt',
      'eventTime',
      'jobName',
      'jobKind',
      'stepIndex',
      'stepName',
      'stepStatus',
      'bodyHash',
      'runId',
      'parent',
      'runPhase',
    ])
    .expression((eb) =>
      eb
        .selectFrom('lineageSteps as s')
        .select([
          's.accountId',
          's.projectId',
          's.executionId',
          sql.val(run.at).as('generatedAt'),
          sql.val(run.at).as('eventTime'),
          's.jobName',
          's.jobKind',
          's.stepIndex',
          's.stepName',
          sql.val(run.eventType).as('stepStatus'),
          's.bodyHash',
          's.runId',
          's.parent',
          sql.lit('END').as('runPhase'),
        ])
        .where('s.executionId', '=', run.executionId)
        .where('s.jobKind', '=', sql.lit('RUN'))
        .where('s.runPhase', '=', sql.lit('START'))
        .where('s.runId', '<>', run.executionId)
        .where(notEnded)
        .$if(passed !== undefined, (q) => q.where('s.stepIndex', '=', -1))
        .$if((passed?.failed.length ?? 0) > 0, (q) => q.where('s.jobName', 'not in', passed!.failed))
        .orderBy('s.id'),
    )
    .onConflict((oc) => oc.columns(RUN_EVENT_KEY).where('jobKind', '=', sql.lit('RUN')).doNothing())
    .returning('id');
}

/** A recorded step with its body, by id. */
export function lineageStepById(db: Executor, id: number) {
  return db
    .selectFrom('lineageSteps as s')
    .innerJoin('lineageBodies as b', (join) => join.onRef('b.projectId', '=', 's.projectId').onRef('b.hash', '=', 's.bodyHash'))
    .selectAll('s')
    .select('b.body')
    .where('s.id', '=', id)
    .executeTakeFirst();
}

/** The class of the two-key advisory locks on an account's kept day counts (migration 0049's trigger takes it too). */
const DAYS_LOCK_CLASS = 34;

/**
 * The account's lock on its kept day counts (PostgreSQL; SQLite has one writer): a read that keeps days it
 * counted holds it shared; a project's deletion, and a step recorded into a past day (migration 0049), alone.
 * So no count taken before either is kept after it.
 */
async function lockDays(trx: Trx, accountId: string, mode: 'shared' | 'alone'): Promise<void> {
  if (dialectOf(trx) !== 'postgres') return;
  if (mode === 'shared') await sql`select pg_advisory_xact_lock_shared(${DAYS_LOCK_CLASS}, hashtext(${accountId}))`.execute(trx);
  else await sql`select pg_advisory_xact_lock(${DAYS_LOCK_CLASS}, hashtext(${accountId}))`.execute(trx);
}

/**
 * Now, by the store's clock (PostgreSQL's, which every server process shares and migration 0049's trigger reads;
 * SQLite's store is on this machine, whose clock is the process's).
 */
async function storeNow(db: Db): Promise<number> {
  if (dialectOf(db) !== 'postgres') return Date.now();
  const { rows } = await sql<{ ms: string | number }>`select floor(extract(epoch from clock_timestamp()) * 1000) as ms`.execute(
    db,
  );
  return Number(rows[0].ms);
}

/**
 * A project's lineage, deleted with it (the rows hold the project without a foreign key), and its account's
 * kept day counts (counted again when next read).
 */
export async function deleteProjectLineage(trx: Trx, accountId: string, projectId: string): Promise<void> {
  // Forgotten first: a step of the project written meanwhile (or after a rollback of this) sends its body again.
  knownCount -= knownBodies.get(projectId)?.size ?? 0;
  knownBodies.delete(projectId);
  await trx.deleteFrom('lineageSteps').where('accountId', '=', accountId).where('projectId', '=', projectId).execute();
  await trx.deleteFrom('lineageBodies').where('projectId', '=', projectId).execute();
  await lockDays(trx, accountId, 'alone');
  await trx.deleteFrom('lineageDays').where('accountId', '=', accountId).execute();
}

/**
 * The project's runs that have a START and no end, latest started first (a child run before the run that ran
 * it), each with its body.
 */
export function openRunsOfProject(db: Executor, accountId: string, projectId: string) {
  return db
    .selectFrom('lineageSteps as s')
    .innerJoin('lineageBodies as b', (join) => join.onRef('b.projectId', '=', 's.projectId').onRef('b.hash', '=', 's.bodyHash'))
    .selectAll('s')
    .select('b.body')
    .where('s.accountId', '=', accountId)
    .where('s.projectId', '=', projectId)
    .where('s.jobKind', '=', 'RUN')
    .where('s.runPhase', '=', 'START')
    .where(notEnded)
    .orderBy('s.id', 'desc')
    .execute();
}

const isoOf = (ms: number) => new Date(ms).toISOString();

/** The account's steps recorded in [from, before) (ms). */
function stepsIn(db: Executor, accountId: string, from: number, before: number) {
  return db
    .selectFrom('lineageSteps')
    .where('accountId', '=', accountId)
    .where('generatedAt', '>=', isoOf(from))
    .where('generatedAt', '<', isoOf(before));
}

/**
 * How many of the account's steps each piece holds: sealed days as kept (counted and kept when missing), the
 * rest counted. Days before the account's first step hold none and are not kept: what is kept grows with the
 * days the account has recorded, not with the windows asked for.
 */
async function countPieces(db: Db, accountId: string, pieces: WindowPiece[]): Promise<number[]> {
  const days = pieces.flatMap((piece) => (piece.day === undefined ? [] : [piece.day]));
  const kept = new Map<string, number>();
  if (days.length > 0) {
    const rows = await db
      .selectFrom('lineageDays')
      .select(['day', 'events'])
      .where('accountId', '=', accountId)
      .where('day', 'in', days)
      .execute();
    for (const row of rows) kept.set(row.day, Number(row.events));
    let missing = pieces.filter((piece) => piece.day !== undefined && !kept.has(piece.day));
    if (missing.length > 0) {
      const first = await db
        .selectFrom('lineageSteps')
        .select('generatedAt')
        .where('accountId', '=', accountId)
        .orderBy('generatedAt')
        .limit(1)
        .executeTakeFirst();
      for (const piece of missing) if (!first || isoOf(piece.before) <= first.generatedAt) kept.set(piece.day!, 0);
      missing = missing.filter((piece) => !kept.has(piece.day!));
    }
    // A store that takes no writes (read-only, its disk full) still answers: a day not kept is counted below.
    if (missing.length > 0)
      for (const [day, events] of await keepDays(db, accountId, missing).catch(() => [])) kept.set(day, events);
  }
  return Promise.all(
    pieces.map((piece) =>
      piece.day !== undefined && kept.has(piece.day)
        ? kept.get(piece.day)!
        : countOf(stepsIn(db, accountId, piece.from, piece.before)),
    ),
  );
}

/**
 * Counts sealed days not yet kept and keeps them, holding the account's day lock shared; the days are
 * counted in one statement, a range of the index each.
 */
async function keepDays(db: Db, accountId: string, days: WindowPiece[]): Promise<[string, number][]> {
  return db.transaction().execute(async (trx) => {
    await lockDays(trx, accountId, 'shared');
    const spans = sql.join(
      days.map(
        (piece) =>
          sql`select cast(${piece.day} as text) as day, cast(${isoOf(piece.from)} as text) as lo, cast(${isoOf(piece.before)} as text) as hi`,
      ),
      sql` union all `,
    );
    const { rows } = await sql<{ day: string; events: number }>`
      select d.day, (select count(*) from lineage_steps s
                     where s.account_id = ${accountId} and s.generated_at >= d.lo and s.generated_at < d.hi) as events
      from (${spans}) d`.execute(trx);
    const counted = rows.map((row): [string, number] => [row.day, Number(row.events)]);
    await trx
      .insertInto('lineageDays')
      .values(counted.map(([day, events]) => ({ accountId, day, events })))
      .onConflict((oc) => oc.columns(['accountId', 'day']).doNothing())
      .execute();
    return counted;
  });
}

/**
 * A page of the account's steps recorded in [from, before) (ms), in the order they were recorded, each with
 * its body. The total is summed from the window's pieces (days.ts): sealed days' kept counts and the rest
 * counted. The page's ids are found in the index (account, time, id) alone, from whichever end of the
 * window is nearer (pageWindow), starting at the edge of the piece that holds the page's first row: the
 * OFFSET walks that piece's rows (a day's, or the day or two not yet sealed), not the window's. Only the
 * page's rows are then read (an OFFSET over the rows themselves would read every skipped one).
 */
export async function pageLineageSteps(db: Db, accountId: string, from: number, before: number, page: PageQuery) {
  const pieces = windowPieces(from, before, await storeNow(db));
  const counts = await countPieces(db, accountId, pieces);
  const total = counts.reduce((sum, count) => sum + count, 0);
  const window = pageWindow(page, total);
  if (!window) return { rows: [], total };
  const step = window.descending ? -1 : 1;
  let at = window.descending ? pieces.length - 1 : 0;
  let offset = window.offset;
  while (offset >= counts[at] && pieces[at + step] !== undefined) {
    offset -= counts[at];
    at += step;
  }
  const matching = window.descending
    ? stepsIn(db, accountId, from, pieces[at].before)
    : stepsIn(db, accountId, pieces[at].from, before);
  const order = window.descending ? 'desc' : 'asc';
  const ids = matching.select('id').orderBy('generatedAt', order).orderBy('id', order).limit(window.limit).offset(offset);
  const rows = await db
    .selectFrom('lineageSteps as s')
    .innerJoin('lineageBodies as b', (join) => join.onRef('b.projectId', '=', 's.projectId').onRef('b.hash', '=', 's.bodyHash'))
    .select([
      's.id',
      's.accountId',
      's.projectId',
      's.executionId',
      's.generatedAt',
      's.eventTime',
      's.jobName',
      's.jobKind',
      's.stepIndex',
      's.stepName',
      's.stepStatus',
      's.bodyHash',
      's.runId',
      's.parent',
      'b.body',
    ])
    .where('s.id', 'in', ids)
    .orderBy('s.generatedAt')
    .orderBy('s.id')
    .execute();
  return { rows, total };
}
