import fs from 'node:fs';
import path from 'node:path';
import SQLite from 'better-sqlite3';
import pg from 'pg';
import { CamelCasePlugin, Kysely, Migrator, PostgresDialect, SqliteDialect, sql, type Transaction } from 'kysely';
import type { Config } from '../config.ts';
import type { Database } from './schema.ts';
import { migrationsFor } from './migrations/index.ts';

export type Db = Kysely<Database>;
export type Trx = Transaction<Database>;
/** Either the database or a transaction on it: repositories take whichever they are given. */
export type Executor = Db | Trx;
export type Dialect = 'sqlite' | 'postgres';

export interface Store {
  db: Db;
  dialect: Dialect;
  close(): Promise<void>;
}

// Large counts and ids come back from pg as strings; the API speaks numbers.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number(value));

/** Opens the configured store: PostgreSQL when a URL is given, else SQLite under the data folder. */
export function openStore(config: Pick<Config, 'databaseUrl' | 'dataDir'>): Store {
  const plugins = [new CamelCasePlugin()];
  if (config.databaseUrl) {
    const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 10 });
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }), plugins });
    return { db, dialect: 'postgres', close: () => db.destroy() };
  }
  fs.mkdirSync(config.dataDir, { recursive: true });
  const file = new SQLite(path.join(config.dataDir, 'platform.db'));
  file.pragma('journal_mode = WAL');
  file.pragma('synchronous = NORMAL');
  file.pragma('foreign_keys = ON');
  file.pragma('busy_timeout = 5000');
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: file }), plugins });
  return { db, dialect: 'sqlite', close: () => db.destroy() };
}

/** Applies every pending migration; safe to run from several processes at once. */
export async function migrate({ db, dialect }: Pick<Store, 'db' | 'dialect'>): Promise<string[]> {
  // On PostgreSQL the migration tables are looked up in the current schema only: unqualified, Kysely
  // takes another schema's tables for ours when several schemas share a database (as tests do).
  const migrationTableSchema =
    dialect === 'postgres' ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(db)).rows[0].schema : undefined;
  const migrator = new Migrator({ db, migrationTableSchema, provider: { getMigrations: async () => migrationsFor(dialect) } });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error;
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/** Current time as stored: ISO 8601 UTC with milliseconds, which sorts as text. */
export function now(): string {
  return new Date().toISOString();
}

export function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: string } | undefined;
  return e?.code === '23505' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

export { sql };
