import type { Kysely } from 'kysely';

/** The two stores. */
export type Dialect = 'sqlite' | 'postgres';

/** A schema step; it is told the dialect for the few types the two stores spell differently. */
export interface PortableMigration {
  up(db: Kysely<unknown>, dialect: Dialect): Promise<void>;
}

/** SQL type of an auto-incrementing integer primary key. */
export function serialKey(dialect: Dialect): 'integer' | 'bigserial' {
  return dialect === 'postgres' ? 'bigserial' : 'integer';
}
