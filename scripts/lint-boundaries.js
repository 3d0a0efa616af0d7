// The house's boundaries (npm run lint:boundaries): the rules of .dependency-cruiser.cjs over every module of src/,
// and no cycle between areas (an area that imports another, through its face, must not be imported back by it:
// break such a loop with a hook the other area registers, as projects' deletion hooks do).
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';

const output = execFileSync(
  process.execPath,
  [
    'node_modules/dependency-cruiser/bin/dependency-cruise.mjs',
    'src',
    '--config',
    '.dependency-cruiser.cjs',
    '--output-type',
    'json',
  ],
  { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
);
const result = JSON.parse(output);
const problems = result.summary.violations.map(
  (violation) =>
    `${violation.rule.name}: ${violation.from} -> ${violation.to}${violation.cycle ? ` (cycle: ${violation.cycle.map((step) => step.name ?? step).join(' -> ')})` : ''}`,
);

const areaOf = (file) => /^src\/areas\/([^/]+)\//.exec(file)?.[1];
const edges = new Map();
for (const module of result.modules) {
  const from = areaOf(module.source);
  if (!from) continue;
  for (const dependency of module.dependencies) {
    const to = areaOf(dependency.resolved);
    if (!to || to === from) continue;
    if (!edges.has(from)) edges.set(from, new Map());
    if (!edges.get(from).has(to)) edges.get(from).set(to, `${module.source} -> ${dependency.resolved}`);
  }
}
for (const [a, targets] of edges) {
  for (const [b, why] of targets) {
    if (a < b && edges.get(b)?.has(a)) problems.push(`area cycle ${a} <-> ${b}: ${why}; ${edges.get(b).get(a)}`);
  }
}
// Longer loops between areas (a -> b -> c -> a).
const seen = new Set();
function walk(area, path) {
  for (const next of edges.get(area)?.keys() ?? []) {
    if (next === path[0] && path.length > 2) {
      const key = [...path].sort().join(',');
      if (!seen.has(key)) {
        seen.add(key);
        problems.push(`area cycle ${[...path, next].join(' -> ')}`);
      }
    } else if (!path.includes(next)) walk(next, [...path, next]);
  }
}
for (const area of edges.keys()) walk(area, [area]);

// No area queries another area's tables: each area's tables.ts names the tables it owns (its XTables
// interface); a query of another area's table (selectFrom, a join, a write) goes through that area's face.
const areasDir = 'src/areas';
const owner = new Map();
for (const area of readdirSync(areasDir, { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name)) {
  let text;
  try {
    text = readFileSync(path.join(areasDir, area, 'tables.ts'), 'utf8');
  } catch {
    continue;
  }
  const body = /export interface \w+Tables \{([^}]*)\}/.exec(text)?.[1] ?? '';
  for (const [, table] of body.matchAll(/^\s+(\w+):/gm)) owner.set(table, area);
}
const QUERY = /\b(selectFrom|updateTable|insertInto|deleteFrom|innerJoin|leftJoin|rightJoin|fullJoin|mergeInto)\(\s*'(\w+)/g;
for (const area of readdirSync(areasDir, { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name)) {
  const dir = path.join(areasDir, area);
  for (const file of readdirSync(dir, { recursive: true }).filter((name) => String(name).endsWith('.ts'))) {
    const full = path.join(dir, String(file));
    const text = readFileSync(full, 'utf8');
    for (const match of text.matchAll(QUERY)) {
      const table = match[2];
      const tableOwner = owner.get(table);
      if (tableOwner && tableOwner !== area) {
        const line = text.slice(0, match.index).split('\n').length;
        problems.push(
          `foreign-table: ${full}:${line} ${match[1]}('${table}') is the ${tableOwner} area's table; use its index.ts`,
        );
      }
    }
  }
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  console.error(`lint:boundaries: ${problems.length} problem(s); the rules and their reasons are in .dependency-cruiser.cjs`);
  process.exit(1);
}
console.log(
  `lint:boundaries: ${result.summary.totalCruised} modules, no boundary crossed, no cycle, no area queries another's tables`,
);
