import type { Executor, Trx } from '../../core/db/database.ts';
import { sql, statementsAreRoundTrips } from '../../core/db/database.ts';
import { preparedQuery } from '../../core/db/prepared.ts';
import { deferInsertOnSqlite, type DeferredInsert } from '../../core/db/group-commit.ts';
import { countOf, pageWindow, type PageQuery } from '../../core/paging.ts';
import type { LineageBodyTable, LineageStepTable } from './tables.ts';

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
});

/**
 * Bodies known to be in the store, by project: seen committed by this process (a step reports the same body
 * run after run, and a body stays while its project does). A step whose body is known is written without
 * it: the body's ~1 KB is neither sent nor looked up again. Learnt only once certain: on SQLite when the
 * group that wrote it has committed (BODY_ROWS.committed); on PostgreSQL when inserting it found it there
 * and the transaction had not inserted it itself (an insert `on conflict do nothing` that meets a row of a
 * transaction in progress waits for its end: it meets only committed rows, or its own transaction's).
 * Forgotten with the project's deletion in this process; another process's deletion leaves an entry that no
 * step can use (the project's runs are gone with it, and its ids are never used again). On PostgreSQL the
 * step of a known body is written only if the body is there (insertStepOfKnownBody): a failover or a restore
 * can lose a commit this process saw; SQLite knows bodies from its own connection's commits, on a file that
 * cannot change under it.
 */
const knownBodies = new Map<string, Set<string>>();
let knownCount = 0;
const KNOWN_BODIES_KEPT = 20_000;

const isKnown = (projectId: string, hash: string) => knownBodies.get(projectId)?.has(hash) === true;

function know(projectId: string, hash: string): void {
  let hashes = knownBodies.get(projectId);
  if (hashes?.has(hash)) return;
  if (knownCount >= KNOWN_BODIES_KEPT) {
    knownBodies.clear();
    knownCount = 0;
    hashes = undefined;
  }
  if (!hashes) knownBodies.set(projectId, (hashes = new Set()));
  hashes.add(hash);
  knownCount += 1;
}

function forget(projectId: string, hash: string): void {
  if (knownBodies.get(projectId)?.delete(hash)) knownCount -= 1;
}

/** PostgreSQL: the bodies each open transaction inserted itself (not committed before it ends: see knownBodies). */
const insertedBy = new WeakMap<Executor, Set<string>>();

/** SQLite: the body unless the project has it already (each statement compiled once). */
const insertBody = preparedQuery((db, body: Pick<LineageBodyTable, keyof LineageBodyTable>) =>
  db
    .insertInto('lineageBodies')
    .values({ projectId: body.projectId, hash: body.hash, body: body.body })
    .onConflict((oc) => oc.columns(['projectId', 'hash']).doNothing()),
);

/** SQLite: the step, after its body (SQLite has no writable WITH, and a statement there is a call, not a round trip). */
const insertStep = preparedQuery((db, step: LineageStepRow) =>
  db.insertInto('lineageSteps').values(stepValues(step)).returning('id'),
);

/**
 * The step of a body known to be stored, written only if the body is there (otherwise no row): the body may
 * have gone since it was known without this process seeing it go (PostgreSQL: a failover to a standby that
 * had not received its commit, a restore from a backup). One index lookup instead of the body's ~1 KB.
 */
const insertStepOfKnownBody = preparedQuery((db, step: LineageStepRow) =>
  db
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
    ])
    .expression(
      db
        .selectNoFrom([
          sql<string>`cast(${step.accountId} as text)`.as('accountId'),
          sql<string>`cast(${step.projectId} as text)`.as('projectId'),
          sql<string>`cast(${step.executionId} as text)`.as('executionId'),
          sql<string>`cast(${step.generatedAt} as text)`.as('generatedAt'),
          sql<string>`cast(${step.eventTime} as text)`.as('eventTime'),
          sql<string>`cast(${step.jobName} as text)`.as('jobName'),
          sql<string>`cast(${step.jobKind} as text)`.as('jobKind'),
          sql<number>`cast(${step.stepIndex} as integer)`.as('stepIndex'),
          sql<string>`cast(${step.stepName} as text)`.as('stepName'),
          sql<string>`cast(${step.stepStatus} as text)`.as('stepStatus'),
          sql<string>`cast(${step.bodyHash} as text)`.as('bodyHash'),
        ])
        .where(({ exists, selectFrom }) =>
          exists(
            selectFrom('lineageBodies').select('hash').where('projectId', '=', step.projectId).where('hash', '=', step.bodyHash),
          ),
        ),
    )
    .returning('id'),
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
    const [row] = await insertStepOfKnownBody(db, step);
    if (row) return Number(row.id);
    forget(step.projectId, step.bodyHash); // gone after all: written with the step below
  }
  if (statementsAreRoundTrips(db)) {
    const [row] = await insertBodyAndStep(db, { ...step, body });
    const key = `${step.projectId} ${step.bodyHash}`;
    let inserted = insertedBy.get(db);
    if (!db.isTransaction) {
      know(step.projectId, step.bodyHash); // the statement committed as it ended
    } else if (Number(row.bodiesInserted) > 0) {
      if (!inserted) insertedBy.set(db, (inserted = new Set()));
      inserted.add(key);
    } else if (!inserted?.has(key)) {
      know(step.projectId, step.bodyHash);
    }
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
    'step_index, step_name, step_status, body_hash)',
  columns: 11,
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
      ]);
      if (deferred) return;
    }
  }
  await insertLineageStep(db, step, body);
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

/** A project's lineage, deleted with it (the rows hold the project without a foreign key). */
export async function deleteProjectLineage(trx: Trx, accountId: string, projectId: string): Promise<void> {
  // Forgotten first: a step of the project written meanwhile (or after a rollback of this) sends its body again.
  knownCount -= knownBodies.get(projectId)?.size ?? 0;
  knownBodies.delete(projectId);
  await trx.deleteFrom('lineageSteps').where('accountId', '=', accountId).where('projectId', '=', projectId).execute();
  await trx.deleteFrom('lineageBodies').where('projectId', '=', projectId).execute();
}

/**
 * A page of the account's steps recorded in [from, before), in the order they were recorded, each with its
 * body. The page's ids are found in the index (account, time, id) alone, from whichever end of the window
 * is nearer (pageWindow), and only those 100 rows are read: an OFFSET over the rows themselves would read
 * every skipped row (bench/lineage.ts: 2.3 s for the last page of 200,000 on PostgreSQL).
 */
export async function pageLineageSteps(db: Executor, accountId: string, from: string, before: string, page: PageQuery) {
  const matching = db
    .selectFrom('lineageSteps')
    .where('accountId', '=', accountId)
    .where('generatedAt', '>=', from)
    .where('generatedAt', '<', before);
  const total = await countOf(matching);
  const window = pageWindow(page, total);
  if (!window) return { rows: [], total };
  const order = window.descending ? 'desc' : 'asc';
  const ids = matching.select('id').orderBy('generatedAt', order).orderBy('id', order).limit(window.limit).offset(window.offset);
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
      'b.body',
    ])
    .where('s.id', 'in', ids)
    .orderBy('s.generatedAt')
    .orderBy('s.id')
    .execute();
  return { rows, total };
}
