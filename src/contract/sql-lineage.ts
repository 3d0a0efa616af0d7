/**
 * The tables a SQL script reads and writes, for lineage: parsed with a maintained SQL parser
 * (node-sql-parser) in the warehouse's grammar, never guessed. A script the parser cannot read yields
 * nothing (no lineage rather than a wrong one). Pure: the agent calls it with the SQL it ran.
 */
import { sqlParser } from './sql-parser.ts';
import type { LineageDataset, StepLineage } from './lineage.ts';

export interface SqlLineageContext {
  /** node-sql-parser's grammar: `postgresql` reads what PostgreSQL and DuckDB run. */
  grammar: string;
  /** The warehouse's OpenLineage namespace, e.g. `postgres://db.internal:5432`. */
  namespace: string;
  /** What an unqualified name means: the connection's database and the search path's schema. */
  defaultDatabase: string;
  defaultSchema: string;
}

/** Statement kinds whose table is written; `select` reads; a dropped table is no dataset of the step. */
const WRITES = new Set(['insert', 'replace', 'update', 'delete', 'create', 'truncate', 'alter']);

/** The datasets `sql` reads and writes, or undefined when the parser cannot read it. */
export function sqlLineage(sql: string, context: SqlLineageContext): StepLineage | undefined {
  const options = { database: context.grammar };
  const inputs = new Map<string, LineageDataset>();
  const outputs = new Map<string, LineageDataset>();
  try {
    const parser = sqlParser(context.grammar);
    // DuckDB's `CREATE OR REPLACE TABLE` writes its table as `CREATE TABLE` does; PostgreSQL's grammar lacks it.
    const ast = parser.astify(sql.replace(/\bcreate\s+or\s+replace\s+table\b/gi, 'CREATE TABLE'), options);
    for (const statement of Array.isArray(ast) ? ast : [ast]) {
      // Names a WITH defines are the statement's own, not tables.
      const local = cteNames(statement);
      // `update t ... from u`: the parser lists both as updated; the statement's first is its target, the rest are read.
      let targetSeen = false;
      for (const entry of parser.tableList(parser.sqlify(statement, options), options)) {
        const [rawKind, schemaPart, table] = entry.split('::');
        const kind = rawKind.toLowerCase();
        if (!table || kind === 'drop') continue;
        if (schemaPart === 'null' && local.has(table.toLowerCase())) continue;
        const [database, schema] =
          schemaPart === 'null'
            ? [context.defaultDatabase, context.defaultSchema]
            : splitSchema(schemaPart, context.defaultDatabase);
        const dataset = { namespace: context.namespace, name: `${database}.${schema}.${table}` };
        const written = kind === 'update' ? !targetSeen : WRITES.has(kind);
        if (kind === 'update') targetSeen = true;
        (written ? outputs : inputs).set(dataset.name, dataset);
      }
    }
  } catch {
    return undefined;
  }
  return { inputs: [...inputs.values()], outputs: [...outputs.values()], sql: sql.slice(0, 100_000) };
}

/** The names every WITH in a statement's tree defines, lower case. */
function cteNames(node: unknown, names = new Set<string>(), depth = 0): Set<string> {
  if (depth > 200 || node === null || typeof node !== 'object') return names;
  if (Array.isArray(node)) {
    for (const item of node) cteNames(item, names, depth + 1);
    return names;
  }
  const record = node as Record<string, unknown>;
  if (Array.isArray(record.with)) {
    for (const cte of record.with as { name?: unknown }[]) {
      const name = typeof cte.name === 'string' ? cte.name : (cte.name as { value?: unknown } | undefined)?.value;
      if (typeof name === 'string') names.add(name.toLowerCase());
    }
  }
  for (const value of Object.values(record)) cteNames(value, names, depth + 1);
  return names;
}

function splitSchema(schemaPart: string, defaultDatabase: string): [string, string] {
  const dot = schemaPart.lastIndexOf('.');
  return dot === -1 ? [defaultDatabase, schemaPart] : [schemaPart.slice(0, dot), schemaPart.slice(dot + 1)];
}
