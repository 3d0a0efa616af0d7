import fs from 'node:fs';
import path from 'node:path';
import SQLite from 'better-sqlite3';
import pg from 'pg';
import {
  CamelCasePlugin,
  Kysely,
  Migrator,
  PostgresAdapter,
  PostgresDialect,
  sql,
  type LogEvent,
  type PostgresPool,
  type PostgresPoolClient,
  type SqliteDatabase,
  type SqliteStatement,
  type Transaction,
} from 'kysely';
import type { Config } from '../config.ts';
import type { Database } from './schema.ts';
import { migrationsFor } from './migrations/index.ts';
import type { Dialect } from './migrations/types.ts';
import { GroupCommitSqliteDialect } from './group-commit.ts';
import {
  announceCommitted,
  claimableWriteEvent,
  DEFERRED_EVENT,
  deferredEvent,
  EVENTS_CHANNEL,
  EVENTS_PER_TRANSACTION,
  type DeferredEvent,
} from './deferred-events.ts';

export type Db = Kysely<Database>;
export type Trx = Transaction<Database>;
/** Either the database or a transaction on it: repositories take whichever they are given. */
export type Executor = Db | Trx;
export type { Dialect };

export interface Store {
  db: Db;
  dialect: Dialect;
  close(): Promise<void>;
  /** Told the duration of every query (for metrics). */
  onQuery?: (durationMs: number, failed: boolean) => void;
  /** Told when PostgreSQL drops a pooled connection (a restart, a failover); the pool replaces it. */
  onConnectionLost?: (error: Error) => void;
}

// Large counts and ids come back from pg as strings; the API speaks numbers.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

/**
 * The URL with `-c setting` added to its startup options, after the URL's own `options` or else PGOPTIONS
 * (which a URL's `options` replaces): set before the connection's first query, with no query of its own
 * racing the first one. PostgreSQL 12 and later know every setting given here.
 */
export function withStartupSetting(databaseUrl: string, setting: string): string {
  let url: URL;
  try {
    url = new URL(databaseUrl);
  } catch {
    return databaseUrl; // not a URL pg reads with options (e.g. a bare key=value string): left as given
  }
  const options = url.searchParams.get('options') ?? process.env.PGOPTIONS ?? '';
  url.searchParams.set('options', `${options} -c ${setting}`.trim());
  return url.toString();
}

/** Opens the configured store: PostgreSQL when a URL is given, else SQLite under the data folder. */
export function openStore(config: Pick<Config, 'databaseUrl' | 'dataDir'> & Partial<Pick<Config, 'rememberReads'>>): Store {
  const plugins = [new CamelCasePlugin()];
  // Kysely times every query for its log function; the store hands the time to whoever listens.
  const observed: Pick<Store, 'onQuery'> = {};
  const log = (event: LogEvent) => observed.onQuery?.(event.queryDurationMillis, event.level === 'error');
  if (config.databaseUrl) {
    // Named statements (withNamedStatements) are parsed once but planned at each run: a plan made once for
    // any parameter values would be one plan for a project of ten variables and for one of a million.
    const pool = new pg.Pool({
      connectionString: withStartupSetting(config.databaseUrl, 'plan_cache_mode=force_custom_plan'),
      max: 10,
    });
    // Without a listener, a lost connection's error would be thrown and end the process.
    const lost = (error: Error) => store.onConnectionLost?.(error);
    pool.on('error', lost);
    const notify = notifier(pool);
    const committed = (events: DeferredEvent[]) => {
      announceCommitted(events);
      notify(events);
    };
    const db = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: withNamedStatements(pool, lost, committed) }),
      plugins,
      log,
    });
    const snapshots = config.rememberReads !== false ? snapshotVersions(config.databaseUrl, lost) : undefined;
    if (snapshots) readVersions.set(db, snapshots.version);
    const close = async () => {
      await snapshots?.close();
      await db.destroy();
    };
    const store: Store = Object.assign(observed, { db, dialect: 'postgres' as const, close });
    return store;
  }
  fs.mkdirSync(config.dataDir, { recursive: true });
  const file = new SQLite(path.join(config.dataDir, 'platform.db'));
  file.pragma('journal_mode = WAL');
  file.pragma('synchronous = NORMAL');
  file.pragma('foreign_keys = ON');
  // A write lock held by another connection is waited for without holding the thread (group-commit.ts).
  file.pragma('busy_timeout = 0');
  const connection = sqliteConnection(file);
  const db = new Kysely<Database>({
    dialect: new GroupCommitSqliteDialect({ database: connection }, () => file.inTransaction),
    plugins,
    log,
  });
  if (config.rememberReads !== false) readVersions.set(db, sharedByOneTurn(connection.version));
  return Object.assign(observed, { db, dialect: 'sqlite' as const, close: () => db.destroy() });
}

/** Account ids per notification: a payload holds at most 8000 bytes. */
const ACCOUNTS_PER_NOTIFICATION = 100;

/**
 * How long the accounts of this process's commits gather before one notification tells them all: each
 * notification is a transaction and a round trip (bench/events.ts: +11 % on run-state changes at 5 ms, +8 to
 * +9.5 % at 20 ms), and it delays only other processes' streams (this process's wake at once).
 */
const NOTIFY_GATHER_MS = 20;

/**
 * Notifies EVENTS_CHANNEL of the accounts whose events this process committed, after the commit and
 * outside the transaction: a NOTIFY inside it would hold PostgreSQL's one notification lock from the
 * commit's start to its end, one committing transaction at a time across the whole server. The accounts of
 * the commits of NOTIFY_GATHER_MS go in one notification, whose transaction commits without waiting for its
 * WAL to reach the disk (synchronous_commit off: a notification is a wake-up, not data; PostgreSQL gives a
 * notifying transaction a transaction id, so each would otherwise cost a flush of the log). A notification
 * lost with its process or a crash costs a reader its poll interval, never an event: readers poll as well.
 */
function notifier(pool: pg.Pool): (events: DeferredEvent[]) => void {
  let accounts: Set<string> | undefined;
  const send = (payload: string) =>
    pool
      .query(
        `set local synchronous_commit to off; select pg_notify(${pg.escapeLiteral(EVENTS_CHANNEL)}, ${pg.escapeLiteral(payload)})`,
      )
      .catch(() => undefined);
  return (events) => {
    if (events.length === 0) return;
    if (!accounts) {
      const waiting = (accounts = new Set());
      setTimeout(() => {
        accounts = undefined;
        const all = [...waiting];
        for (let i = 0; i < all.length; i += ACCOUNTS_PER_NOTIFICATION)
          void send(all.slice(i, i + ACCOUNTS_PER_NOTIFICATION).join(','));
      }, NOTIFY_GATHER_MS).unref();
    }
    for (const event of events) accounts.add(event.accountId);
  };
}

/** SQL texts run as named (server-side prepared) statements on PostgreSQL, and their names. */
const statementNames = new Map<string, string>();

/**
 * Runs `sql` as a named statement on PostgreSQL from now on: each connection parses and plans it once
 * rather than at every run. Only for the queries of preparedQuery, a known and finite set; every other
 * text stays unnamed, so a connection never holds an unbounded number of statements.
 */
export function nameOnServer(sql: string): void {
  if (!statementNames.has(sql)) statementNames.set(sql, `dpc_${statementNames.size}`);
}

/**
 * The pool as Kysely sees it, running the texts of nameOnServer as named statements outside
 * transactions (a transaction runs them unnamed: a failure there could not be retried). A statement
 * prepared before a migration changed the type of a column it returns fails with 0A000 ("cached plan
 * must not change result type"): it is run again unnamed, its connection is closed when released, and
 * every name changes, so that the other connections prepare afresh rather than fail once each. A
 * connection of an older generation is closed when next released, so that it does not keep both sets.
 */
const NO_ROWS = { command: 'SELECT', rowCount: 0, rows: [] };

const OUTBOX_COLUMNS = 'account_id, id, type, project_id, subject, data, occurred_at';

/**
 * The statements that write a transaction's outbox events and commit it. An event's id is a transaction
 * id (xid8) × EVENTS_PER_TRANSACTION + its place: readers read only below the oldest transaction still
 * running (core/outbox.ts), so every id a reader passes is final. The transaction's own id gives the block
 * of its first EVENTS_PER_TRANSACTION - 1 events (place 0 is the audited write's, written only if the
 * transaction changed something); each further EVENTS_PER_TRANSACTION take the block of a subtransaction's
 * id (`dpc_outbox_id_block()`, migration 0041_outbox_id_blocks): newer than the transaction's own, nobody
 * else's, and committed with it. So a transaction writes any number of events, in id order.
 */
export function postgresCommitText(
  audited: DeferredEvent | undefined,
  events: readonly DeferredEvent[],
  literal: (value: string | null) => string,
): string {
  const base = `pg_current_xact_id()::text::bigint * ${EVENTS_PER_TRANSACTION}`;
  // An event's values in OUTBOX_COLUMNS' order, its id as `id` (SQL).
  const row = (event: DeferredEvent, id: string) =>
    `(${literal(event.accountId)}, ${id}, ${literal(event.type)}, ${literal(event.projectId)}::text, ` +
    `${literal(event.subject)}, ${literal(event.data)}, ${literal(event.occurredAt)})`;
  const statements: string[] = [];
  // The audited write's event only if the transaction has an id (changed something): its id is computed in the
  // select, after the condition, so that computing it does not give the transaction one.
  if (audited) {
    statements.push(
      `insert into outbox_events (${OUTBOX_COLUMNS}) select v.a, ${base} + v.n, v.t, v.p, v.s, v.d, v.o ` +
        `from (values ${row(audited, '0')}) as v(a, n, t, p, s, d, o) where pg_current_xact_id_if_assigned() is not null`,
    );
  }
  // The others as plain VALUES: PostgreSQL plans that in about half the time of an INSERT … SELECT.
  const first = events.slice(0, EVENTS_PER_TRANSACTION - 1);
  if (first.length > 0) {
    const values = first.map((event, index) => row(event, `${base} + ${index + 1}`));
    statements.push(`insert into outbox_events (${OUTBOX_COLUMNS}) values ${values.join(', ')}`);
  }
  // Past the transaction's own block: one subtransaction id's block per EVENTS_PER_TRANSACTION events.
  for (let from = first.length; from < events.length; from += EVENTS_PER_TRANSACTION) {
    const values = events.slice(from, from + EVENTS_PER_TRANSACTION).map((event, index) => row(event, String(index)));
    statements.push(
      // Materialized: the block is taken once, whatever the plan.
      `with b as materialized (select dpc_outbox_id_block() * ${EVENTS_PER_TRANSACTION} as base) ` +
        `insert into outbox_events (${OUTBOX_COLUMNS}) select v.a, b.base + v.n, v.t, v.p, v.s, v.d, v.o ` +
        `from b, (values ${values.join(', ')}) as v(a, n, t, p, s, d, o)`,
    );
  }
  statements.push('commit');
  return statements.join(';\n');
}

function withNamedStatements(
  pool: pg.Pool,
  onLost: (error: Error) => void,
  onCommitted: (events: DeferredEvent[]) => void,
): PostgresPool {
  let generation = 0;
  const generationOf = new WeakMap<pg.PoolClient, number>();
  return {
    async connect() {
      const client = await pool.connect();
      if (!generationOf.has(client)) generationOf.set(client, generation);
      let stale = false;
      let inTransaction = false;
      // The pool listens for errors of idle connections only: one lost while lent out between two
      // statements (in a transaction) would be thrown and end the process. Its next statement fails instead.
      const lost = (error: Error) => {
        stale = true;
        onLost(error);
      };
      client.on('error', lost);
      // Outbox events of the open transaction, written with its commit (deferred-events.ts).
      let events: DeferredEvent[] = [];
      const savepoints = new Map<string, number>();
      const query = async (text: string, values: unknown[]) => {
        if (text === DEFERRED_EVENT) {
          if (!inTransaction) throw new Error('An outbox event is written in a transaction.');
          events.push(deferredEvent(values));
          return NO_ROWS;
        }
        // Kysely's own transaction statements (savepoints keep the transaction open).
        if (text === 'begin' || text.startsWith('start transaction')) {
          inTransaction = true;
          events = [];
          savepoints.clear();
        } else if (text === 'commit') {
          inTransaction = false;
          return commitWithEvents();
        } else if (text === 'rollback') {
          inTransaction = false;
          events = [];
        } else if (text.startsWith('savepoint ')) {
          savepoints.set(text.slice('savepoint '.length), events.length);
        } else if (text.startsWith('rollback to ')) {
          events.length = savepoints.get(text.slice('rollback to '.length)) ?? events.length;
        }
        const name = statementNames.get(text);
        if (!name || inTransaction) return client.query(text, values);
        try {
          return await client.query({ name: `${name}_${generation}`, text, values });
        } catch (error) {
          if ((error as { code?: string }).code !== '0A000') throw error;
          stale = true;
          generation += 1;
          return client.query(text, values);
        }
      };
      /**
       * The commit, with the transaction's events (and the pending event of the audited write it is part
       * of, if it changed anything) inserted ahead of it in the same round trip: one text of several
       * statements, values as literals. The process notifies listeners after it returns (onCommitted).
       */
      const commitWithEvents = async () => {
        const committing = events;
        events = [];
        const pending = claimableWriteEvent();
        if (committing.length === 0 && !pending) return client.query('commit');
        const audited = pending?.event();
        if (pending) pending.committing = true;
        try {
          // Quotes doubled (a value without a backslash reads the same whatever standard_conforming_strings is);
          // pg's escapeLiteral, a loop over every character, for the rest.
          const literal = (value: string | null) =>
            value === null ? 'null' : value.includes('\\') ? client.escapeLiteral(value) : `'${value.replaceAll("'", "''")}'`;
          const results = (await client.query(postgresCommitText(audited, committing, literal))) as unknown as pg.QueryResult[];
          const auditedWritten = audited !== undefined && results[0].rowCount === 1;
          if (pending && auditedWritten) pending.written = true;
          onCommitted([...(auditedWritten ? [audited] : []), ...committing]);
          return results.at(-1)!;
        } finally {
          if (pending) pending.committing = false;
        }
      };
      let released = false;
      const release = () => {
        // Once only: pg-pool gives the client a new release at each loan, so a second call would end another's.
        if (released) return;
        released = true;
        client.off('error', lost);
        client.release(stale || generationOf.get(client) !== generation);
      };
      return { query, release } as unknown as PostgresPoolClient;
    },
    end: () => pool.end(),
  };
}

/**
 * Whether each statement costs a round trip to a database server (PostgreSQL) rather than a call into
 * this process (SQLite): where it does, fewer statements with more in each are worth it.
 */
export function statementsAreRoundTrips(db: Executor): boolean {
  return dialectOf(db) === 'postgres';
}

/** Which store `db` writes to. */
export function dialectOf(db: Executor): Dialect {
  return db.getExecutor().adapter instanceof PostgresAdapter ? 'postgres' : 'sqlite';
}

const readVersions = new WeakMap<Executor, () => string | Promise<string | undefined> | undefined>();

/**
 * A token that changes whenever the store may have changed since it was last taken, by this process
 * or any other: a read answered while the token stays the same is still the answer. Undefined inside a
 * transaction (which sees its own writes), where remembering is turned off, and when PostgreSQL could
 * not be asked, so there nothing may be reused.
 */
export function readVersion(db: Executor): string | Promise<string | undefined> | undefined {
  return readVersions.get(db)?.();
}

/** How long a read waits for the store's snapshot before it asks the store itself. */
const SNAPSHOT_PATIENCE_MS = 1000;
const SNAPSHOT_QUERY = `select pg_postmaster_start_time()::text || ' ' || pg_current_snapshot()::text as version`;

interface SnapshotBatch {
  version: Promise<string | undefined>;
  /** Answers the batch's reads; only the first answer counts. */
  answer(version: string | undefined): void;
}

/**
 * PostgreSQL's read version: its current snapshot (xmin:xmax:in-progress ids), which stays the same
 * until a transaction that wrote ends, on any connection of the server: one that commits either was in
 * progress (listed) or began after (moves xmax). Transaction ids count forward only while one server
 * runs: a restore from a backup or a promoted standby hands the same ids out again over other data, so
 * the server's start time is part of the version.
 *
 * Asking is a round trip, so reads share it: at most one query is on its way, and the reads that ask
 * meanwhile wait together for the next, sent when it returns. A read never takes the answer of a query
 * sent before it asked: that snapshot could miss a commit the client already knows of. The queries run
 * on a connection of their own, not the pool's, so that they never wait behind the work they would
 * save. A read waits at most SNAPSHOT_PATIENCE_MS, then asks the store itself (undefined); a query past
 * that is given up with its connection (a dead one would hold every read up), and the next gets a new one.
 */
function snapshotVersions(connectionString: string, onLost: (error: Error) => void) {
  let known = true; // PostgreSQL before 13 has no pg_current_snapshot(): nothing is remembered there
  let closed = false;
  let connection: { client: pg.Client; ready: Promise<unknown> } | undefined;
  let waiting: SnapshotBatch | undefined;
  let asking: SnapshotBatch | undefined;

  const connect = () => {
    const client = new pg.Client({ connectionString });
    client.on('error', (error) => {
      forget(client);
      onLost(error);
    });
    return { client, ready: client.connect() };
  };
  const forget = (client: pg.Client) => {
    if (connection?.client === client) connection = undefined;
    client.end().catch(() => undefined);
  };
  const ask = async (batch: SnapshotBatch) => {
    asking = batch;
    const { client, ready } = (connection ??= connect());
    try {
      await ready;
      const result = await client.query<{ version: string }>({ name: 'dpc_snapshot', text: SNAPSHOT_QUERY });
      batch.answer(result.rows[0].version);
    } catch (error) {
      if ((error as { code?: string }).code === '42883') known = false;
      forget(client);
      batch.answer(undefined);
    }
    if (asking === batch) next();
  };
  const next = () => {
    asking = undefined;
    const batch = waiting;
    waiting = undefined;
    if (batch && closed) batch.answer(undefined);
    else if (batch) void ask(batch);
  };

  return {
    version(): Promise<string | undefined> | undefined {
      if (!known || closed) return undefined;
      if (!waiting) {
        let answer!: (version: string | undefined) => void;
        const batch: SnapshotBatch = {
          version: new Promise((resolve) => (answer = resolve)),
          answer: (version) => {
            clearTimeout(patience);
            answer(version);
          },
        };
        const patience = setTimeout(() => {
          batch.answer(undefined);
          // Still on its way: the query is given up with its connection, and the next batch goes out on a new one.
          if (asking === batch) {
            if (connection) forget(connection.client);
            next();
          }
        }, SNAPSHOT_PATIENCE_MS).unref();
        waiting = batch;
        // The reads of this turn of the event loop ask together.
        if (!asking) setImmediate(() => !asking && next());
      }
      return waiting.version;
    },
    async close() {
      closed = true;
      const client = connection?.client;
      connection = undefined;
      await client?.end().catch(() => undefined);
    },
  };
}

/**
 * `read`, shared by the callers that ask within one turn of the event loop: it runs once they all
 * have asked (in setImmediate, after the turn's sockets were read) and answers them all. Since it runs
 * after each caller asked, its answer is never older than a caller's request, as if each had read it.
 * For SQLite's read version, a pragma of 3-6 µs (two lock calls) per remembered read before; under load
 * a turn reads tens of requests.
 */
function sharedByOneTurn<T>(read: () => T): () => Promise<T> {
  let next: Promise<T> | undefined;
  return () =>
    (next ??= new Promise<T>((resolve, reject) =>
      setImmediate(() => {
        next = undefined;
        try {
          resolve(read());
        } catch (error) {
          reject(error);
        }
      }),
    ));
}

const STATEMENT_CACHE_SIZE = 500;

/**
 * The SQLite connection as Kysely sees it, with two additions. Statements are kept per SQL text:
 * better-sqlite3 compiles SQL on every prepare(), and Kysely prepares each query anew. And it knows
 * its read version (see readVersion): SQLite's data_version changes when another connection (another
 * process) commits, and a counter here counts the rows and table definitions this connection's
 * statements changed, counted as each returns (before anything else can run on this thread).
 */
function sqliteConnection(file: SQLite.Database): SqliteDatabase & { version(): string } {
  const statements = new Map<string, SqliteStatement>();
  const dataVersion = file.prepare('pragma data_version').pluck();
  let changes = 0;
  // A definition (a table created, altered, dropped) changes no row but may change every answer.
  const counted = (statement: SQLite.Statement, definition: boolean): SqliteStatement => ({
    reader: statement.reader,
    all(parameters) {
      const rows = statement.all(parameters); // a write with RETURNING: a row per changed row
      changes += rows.length + Number(definition);
      return rows;
    },
    run(parameters) {
      const result = statement.run(parameters);
      changes += Number(result.changes) + Number(definition);
      return result;
    },
    iterate(parameters) {
      changes += 1; // rows handed out later: counted as a change ahead
      return statement.iterate(parameters);
    },
  });
  return {
    prepare(source: string) {
      let statement = statements.get(source);
      if (!statement) {
        const prepared = file.prepare(source);
        // Transaction control (begin, commit) is read-only to SQLite; the writes inside are counted.
        statement = prepared.readonly ? prepared : counted(prepared, /^\s*(create|alter|drop)\b/i.test(source));
        if (statements.size >= STATEMENT_CACHE_SIZE) statements.delete(statements.keys().next().value!);
        statements.set(source, statement);
      }
      return statement;
    },
    close: () => file.close(),
    version: () => `${dataVersion.get() as number}.${changes}`,
  };
}

/** Applies every pending migration; safe to run from several processes at once. */
async function migratorOf({ db, dialect }: Pick<Store, 'db' | 'dialect'>): Promise<Migrator> {
  // Name the schema on PostgreSQL: otherwise Kysely takes a migration table of any schema for its own.
  const migrationTableSchema =
    dialect === 'postgres'
      ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(db)).rows[0].schema
      : undefined;
  // Migration numbers are handed out ahead (0006 to 0013), and a later number may land first: a store that has
  // run 0009 must still take 0008 when it arrives. Each step touches only its own tables, so order between
  // them does not matter.
  return new Migrator({
    db,
    migrationTableSchema,
    allowUnorderedMigrations: true,
    provider: { getMigrations: async () => migrationsFor(dialect) },
  });
}

/** Names of the migrations this code has that the store has not applied (a newer release is rolling out). */
export async function pendingMigrations(store: Pick<Store, 'db' | 'dialect'>): Promise<string[]> {
  const migrations = await (await migratorOf(store)).getMigrations();
  return migrations.filter((m) => !m.executedAt).map((m) => m.name);
}

export async function migrate(store: Pick<Store, 'db' | 'dialect'>): Promise<string[]> {
  const { error, results } = await (await migratorOf(store)).migrateToLatest();
  if (error) throw error;
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/** Current time as stored: ISO 8601 UTC with milliseconds, which sorts as text. */
export function now(): string {
  return new Date().toISOString();
}

/** A write that refers to a row another transaction has just deleted (a project, an environment). */
export function isForeignKeyViolation(error: unknown): boolean {
  const code = (error as { code?: string } | undefined)?.code;
  return code === '23503' || code === 'SQLITE_CONSTRAINT_FOREIGNKEY';
}

/** The store could not take the write now (SQLite locked by another connection for 5 s, a deadlock): worth retrying. */
export function isTransientStoreFailure(error: unknown): boolean {
  const code = (error as { code?: string } | undefined)?.code;
  return code === 'SQLITE_BUSY' || code === '40P01' || code === '40001';
}

export function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string } | undefined;
  return e?.code === '23505' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

export { sql };
