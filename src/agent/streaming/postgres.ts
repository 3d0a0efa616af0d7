/**
 * A PostgreSQL source: logical replication with the built-in pgoutput plugin, decoded by
 * pg-logical-replication. The agent makes a publication for the pipeline's tables and a replication slot;
 * the slot keeps every change from its creation until the agent acknowledges it, which it does only once
 * the change is written to the target.
 */
import pg from 'pg';
import { LogicalReplicationService, PgoutputPlugin, type Pgoutput } from 'pg-logical-replication';
import type { SourceColumn, TableName } from './target.ts';

export interface PostgresConnection {
  host: string;
  port: number;
  database: string;
  user: string;
  password?: string;
  ssl?: boolean;
}

export type { TableName } from './target.ts';

/** A double-quoted identifier. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

const quoteLiteral = (value: string) => `'${value.replaceAll("'", "''")}'`;

function clientConfig(connection: PostgresConnection): pg.ClientConfig {
  return {
    host: connection.host,
    port: connection.port,
    database: connection.database,
    user: connection.user,
    password: connection.password,
    ssl: connection.ssl ? { rejectUnauthorized: false } : undefined,
    application_name: 'dpc-agent-streaming',
    connectionTimeoutMillis: 15_000,
  };
}

export class SourceNotReady extends Error {}

export class PostgresSource {
  constructor(readonly connection: PostgresConnection) {}

  async withClient<T>(use: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client(clientConfig(this.connection));
    client.on('error', () => undefined);
    await client.connect();
    try {
      return await use(client);
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /**
   * Refuses a source that cannot stream: wal_level other than logical (named, with what to set), a table
   * that does not exist. Answers the server's version number.
   */
  async check(tables: TableName[]): Promise<void> {
    await this.withClient(async (client) => {
      const { rows } = await client.query<{ wal_level: string }>('SHOW wal_level');
      const level = rows[0]?.wal_level;
      if (level !== 'logical') {
        throw new SourceNotReady(
          `the source's wal_level is ${level}; change data capture needs wal_level=logical (set it in postgresql.conf and restart PostgreSQL)`,
        );
      }
      for (const { schema, table } of tables) {
        const found = await client.query('SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = $1 AND tablename = $2', [
          schema,
          table,
        ]);
        if (found.rowCount === 0) throw new SourceNotReady(`the source has no table ${schema}.${table}`);
        // In a publication, a table without a replica identity refuses UPDATE and DELETE at the source: refuse it first.
        const identity = await client.query<{ relreplident: string; keyed: boolean }>(
          `SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) AS keyed
             FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = $1 AND c.relname = $2`,
          [schema, table],
        );
        const { relreplident, keyed } = identity.rows[0]!;
        if (relreplident === 'n' || (relreplident === 'd' && !keyed)) {
          throw new SourceNotReady(
            `the table ${schema}.${table} has no replica identity (no primary key); add one or set REPLICA IDENTITY FULL, else its updates and deletes would fail at the source once published`,
          );
        }
      }
    });
  }

  /** A table's columns (information_schema) and primary key columns: what a warehouse target types its tables by. */
  async describe(table: TableName): Promise<{ columns: SourceColumn[]; key: string[] }> {
    return this.withClient(async (client) => {
      const columns = await client.query<{ name: string; data_type: string; precision: number | null; scale: number | null }>(
        `SELECT column_name AS name, data_type, numeric_precision AS precision, numeric_scale AS scale
           FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
        [table.schema, table.table],
      );
      const key = await client.query<{ name: string }>(
        `SELECT a.attname AS name FROM pg_catalog.pg_index i
           JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
          WHERE i.indisprimary AND i.indrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass
          ORDER BY array_position(i.indkey, a.attnum)`,
        [table.schema, table.table],
      );
      return {
        columns: columns.rows.map((row) => ({
          name: row.name,
          dataType: row.data_type,
          precision: row.precision,
          scale: row.scale,
        })),
        key: key.rows.map((row) => row.name),
      };
    });
  }

  /** Makes the publication for exactly `tables` (or sets its tables when it exists). */
  async ensurePublication(publication: string, tables: TableName[]): Promise<void> {
    const list = tables.map(({ schema, table }) => `${quoteIdent(schema)}.${quoteIdent(table)}`).join(', ');
    await this.withClient(async (client) => {
      const exists = await client.query('SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1', [publication]);
      await client.query(
        exists.rowCount
          ? `ALTER PUBLICATION ${quoteIdent(publication)} SET TABLE ${list}`
          : `CREATE PUBLICATION ${quoteIdent(publication)} FOR TABLE ${list}`,
      );
    });
  }

  async slotExists(slot: string): Promise<boolean> {
    return this.withClient(
      async (client) =>
        ((await client.query('SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1', [slot])).rowCount ?? 0) > 0,
    );
  }

  /** Waits until no connection streams from the slot (an agent killed a moment ago may still hold it). */
  async waitForSlotIdle(slot: string, waitMs: number): Promise<void> {
    await this.withClient(async (client) => {
      const deadline = Date.now() + waitMs;
      for (;;) {
        const found = await client.query<{ active: boolean; active_pid: number | null }>(
          'SELECT active, active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = $1',
          [slot],
        );
        const current = found.rows[0];
        if (!current)
          throw new Error(`the replication slot ${slot} is gone from the source; drop the pipeline's position to start afresh`);
        if (!current.active) return;
        if (Date.now() > deadline) throw new Error(`the replication slot ${slot} is in use by process ${current.active_pid}`);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    });
  }

  /**
   * Drops the slot (waiting up to `waitMs` for a connection that still uses it to go, e.g. that of an agent
   * killed a moment ago) and the publication, when named. Answers whether there was a slot.
   */
  async dropSlot(slot: string, publication: string | undefined, waitMs = 15_000): Promise<boolean> {
    return this.withClient(async (client) => {
      const deadline = Date.now() + waitMs;
      let dropped = false;
      for (;;) {
        const found = await client.query<{ active: boolean; active_pid: number | null }>(
          'SELECT active, active_pid FROM pg_catalog.pg_replication_slots WHERE slot_name = $1',
          [slot],
        );
        const current = found.rows[0];
        if (!current) break;
        if (!current.active) {
          await client.query('SELECT pg_catalog.pg_drop_replication_slot($1)', [slot]);
          dropped = true;
          break;
        }
        if (Date.now() > deadline) throw new Error(`the replication slot ${slot} is in use by process ${current.active_pid}`);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      if (publication !== undefined) await client.query(`DROP PUBLICATION IF EXISTS ${quoteIdent(publication)}`);
      return dropped;
    });
  }

  /**
   * Makes the replication slot. With `snapshot`, the slot's snapshot is handed to `snapshot` (a client in a
   * REPEATABLE READ transaction that sees exactly the rows the slot's first change follows). Answers the
   * slot's consistent point: the stream starts there.
   */
  async createSlot(slot: string, snapshot?: (client: pg.Client, lsn: string) => Promise<void>): Promise<string> {
    const replication = new pg.Client({ ...clientConfig(this.connection), replication: 'database' } as pg.ClientConfig);
    replication.on('error', () => undefined);
    await replication.connect();
    try {
      const created = await replication.query<{ consistent_point: string; snapshot_name: string | null }>(
        `CREATE_REPLICATION_SLOT ${quoteIdent(slot)} LOGICAL pgoutput ${snapshot ? 'EXPORT_SNAPSHOT' : 'NOEXPORT_SNAPSHOT'}`,
      );
      const { consistent_point: lsn, snapshot_name: name } = created.rows[0]!;
      if (!snapshot) return lsn;
      await this.withClient(async (client) => {
        await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        await client.query(`SET TRANSACTION SNAPSHOT ${quoteLiteral(name!)}`);
        // The exported snapshot lives until the replication connection's next command; imported, it no longer needs it.
        await replication.end().catch(() => undefined);
        try {
          await snapshot(client, lsn);
        } finally {
          await client.query('COMMIT').catch(() => undefined);
        }
      });
      return lsn;
    } finally {
      await replication.end().catch(() => undefined);
    }
  }

  /** Reads a table's rows in the client's transaction, `batch` rows at a time. */
  static async *rowsOf(client: pg.Client, table: TableName, batch: number): AsyncGenerator<Record<string, unknown>[]> {
    const cursor = `dpc_snapshot_${Math.random().toString(36).slice(2)}`;
    await client.query(
      `DECLARE ${cursor} NO SCROLL CURSOR FOR SELECT * FROM ${quoteIdent(table.schema)}.${quoteIdent(table.table)}`,
    );
    try {
      for (;;) {
        const { rows } = await client.query<Record<string, unknown>>(`FETCH ${batch} FROM ${cursor}`);
        if (rows.length === 0) return;
        yield rows;
      }
    } finally {
      await client.query(`CLOSE ${cursor}`).catch(() => undefined);
    }
  }

  /**
   * The change stream from `from` on: each decoded pgoutput message with the LSN it was sent at, in
   * order. `onMessage` may answer a promise; the stream waits for it (backpressure). `acknowledge` tells
   * the source what may be released.
   */
  stream(
    slot: string,
    publication: string,
    from: string,
    handlers: {
      onMessage(lsn: string, message: Pgoutput.Message): Promise<void> | void;
      /**
       * A keepalive at `lsn`. `drained`: every change message received before it has been handed to
       * `onMessage` and settled (the library queues changes but sends keepalives at once, so a keepalive can
       * overtake changes still waiting: acknowledging its position then would release them unwritten).
       */
      onKeepalive(lsn: string, shouldRespond: boolean, drained: boolean): void;
      onError(error: Error): void;
    },
  ): ChangeStream {
    const service = new LogicalReplicationService(
      { ...clientConfig(this.connection) },
      { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: true } },
    );
    service.on('data', (lsn: string, message: Pgoutput.Message) => handlers.onMessage(lsn, message));
    // The library's queue of received changes (internal fields; if a version drops them, never drained).
    const queue = service as unknown as { _messageQueue?: unknown[]; _processing?: boolean };
    const drained = () => Array.isArray(queue._messageQueue) && queue._messageQueue.length === 0 && queue._processing === false;
    service.on('heartbeat', (lsn: string, _timestamp: number, shouldRespond: boolean) =>
      handlers.onKeepalive(lsn, shouldRespond, drained()),
    );
    service.on('error', (error: Error) => handlers.onError(error));
    const plugin = new PgoutputPlugin({ protoVersion: 1, publicationNames: [publication] });
    fastTuples(plugin);
    const started = service.subscribe(plugin, slot, from);
    return {
      started: started.then(() => undefined),
      acknowledge: (lsn) => service.acknowledge(lsn).then(() => undefined),
      stop: () => service.destroy().then(() => undefined),
    };
  }
}

type TupleColumn = { name: string; parser: (text: string) => unknown };
type TupleReader = {
  readInt16(): number;
  readInt32(): number;
  readUint8(): number;
  read(n: number): Uint8Array;
  decodeText(bytes: Uint8Array): string;
};

/**
 * The library's tuples are made with Object.create(null): objects in V8's slow (dictionary) mode, which
 * JSON.stringify and every later read take the slow way. Here a tuple is a plain object whose columns are set
 * in the relation's order (so the rows of a table share one shape), with the same values the library gives:
 * text parsed by node-postgres's parser of the column's type, binary as bytes, null, and an unchanged TOASTed
 * value taken from the old row when there is one. A relation with a column named __proto__ keeps the library's
 * way (on a plain object that name would set the prototype).
 */
function fastTuples(plugin: PgoutputPlugin): void {
  const parser = (plugin as unknown as { parser: Record<string, unknown> }).parser;
  const libraryRead = parser.readTuple as (reader: TupleReader, relation: unknown, fallback?: unknown) => unknown;
  const plain = new WeakMap<object, boolean>();
  parser.readTuple = function readTuple(
    reader: TupleReader,
    relation: { columns: TupleColumn[] },
    unchangedToastFallback?: Record<string, unknown> | null,
  ) {
    let ok = plain.get(relation);
    if (ok === undefined) plain.set(relation, (ok = !relation.columns.some((column) => column.name === '__proto__')));
    if (!ok) return libraryRead.call(this, reader, relation, unchangedToastFallback);
    const { columns } = relation;
    const count = reader.readInt16();
    const tuple: Record<string, unknown> = {};
    for (let i = 0; i < count; i += 1) {
      const { name, parser: parse } = columns[i]!;
      const kind = reader.readUint8();
      if (kind === 0x74 /* t: text */) tuple[name] = parse(reader.decodeText(reader.read(reader.readInt32())));
      else if (kind === 0x6e /* n: null */) tuple[name] = null;
      else if (kind === 0x75 /* u: unchanged TOASTed value */) tuple[name] = unchangedToastFallback?.[name];
      else if (kind === 0x62 /* b: binary */) tuple[name] = reader.read(reader.readInt32());
      else throw Error(`unknown attribute kind ${String.fromCharCode(kind)}`);
    }
    return tuple;
  };
}

export interface ChangeStream {
  /** Settles when the stream ends (rejects when it could not start or broke). */
  started: Promise<void>;
  acknowledge(lsn: string): Promise<void>;
  stop(): Promise<void>;
}
