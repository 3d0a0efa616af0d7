import type { Compilable, CompiledQuery } from 'kysely';
import { nameOnServer, type Executor } from './database.ts';

/** Stands for a parameter while a query is compiled; replaced by the caller's value at each run. */
class Placeholder {
  constructor(readonly name: string) {}
}

interface Compiled<R> {
  query: CompiledQuery<R>;
  /** for each of the query's parameters: the name of the caller's value, or the constant itself */
  parameters: (Placeholder | unknown)[];
}

function compile<P, R>(db: Executor, build: (db: Executor, params: P) => Compilable<R>): Compiled<R> {
  const used = new Set<string>();
  const stand = new Proxy({} as P & object, {
    get: (_, name) => {
      used.add(String(name));
      return new Placeholder(String(name));
    },
  });
  const query = build(db, stand).compile();
  const bound = new Set(query.parameters.filter((value) => value instanceof Placeholder).map((value) => value.name));
  // A stand-in the compiler wrote into the SQL text instead of binding it would be a wrong query.
  const inlined = [...used].filter((name) => !bound.has(name));
  if (inlined.length > 0) throw new Error(`parameters not bound by the compiled query: ${inlined.join(', ')}`);
  nameOnServer(query.sql);
  return { query, parameters: [...query.parameters] };
}

/**
 * A query built and compiled once, then run with new parameter values: the query builder spends about
 * 30 µs building and compiling a query, more than SQLite takes to answer a page. `build` receives
 * stand-ins for the parameters (use them only as values, not to decide the query's shape). The compiled
 * query is kept per store (its dialect and plugins decide the SQL), and a transaction shares its store's.
 * better-sqlite3 then finds the statement prepared for that SQL text (see sqliteConnection), and on
 * PostgreSQL it runs as a named statement, parsed and planned once per connection (nameOnServer).
 */
export function preparedQuery<P extends Record<string, unknown>, R>(
  build: (db: Executor, params: P) => Compilable<R>,
): (db: Executor, params: P) => Promise<R[]> {
  const compiledPerStore = new WeakMap<object, Compiled<R>>();
  return async (db, params) => {
    // Kysely shares one adapter between a database and its transactions: the key of "this store"
    // (getExecutor is marked internal in Kysely, which is pinned to 0.28).
    const store = db.getExecutor().adapter;
    let compiled = compiledPerStore.get(store);
    if (!compiled) {
      compiled = compile(db, build);
      compiledPerStore.set(store, compiled);
    }
    const parameters = compiled.parameters.map((value) => (value instanceof Placeholder ? params[value.name] : value));
    const { rows } = await db.executeQuery<R>({ ...compiled.query, parameters });
    return rows;
  };
}
