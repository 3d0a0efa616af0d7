/**
 * npm run bench [names...]: every benchmark in this folder (or those named), one after another.
 * Each is a module exporting bench(); it compares against a baseline in the same run and prints ratios.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

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
