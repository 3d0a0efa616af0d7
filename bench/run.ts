/**
 * npm run bench [names...]: every benchmark in this folder (or those named), one after another.
 * Each is a module exporting bench(); it compares against a baseline in the same run, prints its
 * measurements and contributes summary rows (name, measured, target) through record() of lib.ts.
 * A new file in this folder is run without being registered anywhere.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { met, recorded } from './lib.ts';

const folder = path.dirname(fileURLToPath(import.meta.url));
const names = readdirSync(folder)
  .filter((file) => file.endsWith('.ts') && !['lib.ts', 'run.ts'].includes(file))
  .map((file) => file.slice(0, -3))
  .sort((a, b) => (a === 'foundation' ? -1 : b === 'foundation' ? 1 : a.localeCompare(b)));
const chosen = process.argv.slice(2);
for (const name of chosen.length > 0 ? chosen : names) {
  console.log(`\n== ${name}`);
  const module = (await import(path.join(folder, `${name}.ts`))) as { bench(): Promise<void> };
  await module.bench();
}

const rows = recorded();
console.log('\n| measurement | measured | target | met |\n|---|---|---|---|');
for (const row of rows) {
  const target = row.atLeast !== undefined ? `>= ${row.atLeast}` : row.atMost !== undefined ? `<= ${row.atMost}` : '';
  const verdict = met(row);
  console.log(
    `| ${row.name} | ${row.measured.toFixed(2)} | ${target} | ${verdict === undefined ? '' : verdict ? 'yes' : 'no'} |`,
  );
}
const targeted = rows.filter((row) => met(row) !== undefined);
console.log(`bench: ${targeted.filter((row) => met(row)).length} of ${targeted.length} targets met`);
