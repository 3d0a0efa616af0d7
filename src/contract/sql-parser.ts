/**
 * node-sql-parser, one grammar at a time and only when first needed. The package's main module holds every
 * grammar (5 MB of code) and names an 18 MB source map, which Node reads and keeps whenever source maps are
 * enabled (tsx enables them): loading it at start cost the server some 50 MB of memory it rarely needs.
 * Each grammar's own build (`node-sql-parser/build/<grammar>`) is a twentieth of that, and is loaded with
 * source maps off (its map only names the parser generator's output, of no use in a stack trace).
 */
import { createRequire } from 'node:module';
import type { Parser } from 'node-sql-parser';

const require = createRequire(import.meta.url);

/** The grammars node-sql-parser builds one by one (its `build/` folder). */
const GRAMMARS = new Set([
  'athena',
  'bigquery',
  'db2',
  'flinksql',
  'hive',
  'mariadb',
  'mysql',
  'noql',
  'postgresql',
  'redshift',
  'snowflake',
  'sqlite',
  'transactsql',
  'trino',
]);

const parsers = new Map<string, Parser>();

/** The file of `grammar`'s own build (for a thread that loads it itself: the server's SQL checks). */
export function sqlParserModule(grammar: string): string {
  const key = grammar.toLowerCase();
  if (!GRAMMARS.has(key)) throw new Error(`node-sql-parser has no grammar "${grammar}"`);
  return require.resolve(`node-sql-parser/build/${key}`);
}

/** A parser of `grammar` (node-sql-parser's name: `postgresql`, `mysql`, ...), loaded on first use. */
export function sqlParser(grammar: string): Parser {
  const key = grammar.toLowerCase();
  let parser = parsers.get(key);
  if (parser) return parser;
  if (!GRAMMARS.has(key)) throw new Error(`node-sql-parser has no grammar "${grammar}"`);
  const mapsWereOn = process.sourceMapsEnabled;
  if (mapsWereOn) process.setSourceMapsEnabled(false);
  try {
    const module = require(`node-sql-parser/build/${key}`) as { Parser: new () => Parser };
    parser = new module.Parser();
  } finally {
    if (mapsWereOn) process.setSourceMapsEnabled(true);
  }
  parsers.set(key, parser);
  return parser;
}
