import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ORCHESTRATION_TYPES } from '../../src/contract/pipeline-file.ts';

/**
 * The contract's list of orchestration component types (what the review warns of when a file names another)
 * is the reference agent's: the cases of its `execute`, read from its source.
 */
test("the contract's orchestration component types are the cases the reference agent runs", () => {
  const source = readFileSync(new URL('../../src/agent/pipeline-runner.ts', import.meta.url), 'utf8');
  const start = source.indexOf('switch (component.type) {');
  const end = source.indexOf('is not supported by the reference agent', start);
  assert.ok(start > 0 && end > start, 'the switch of execute() is where this test looks');
  const cases = [...source.slice(start, end).matchAll(/case '([a-z0-9-]+)':/g)].map((match) => match[1]);
  assert.deepEqual([...cases].sort(), [...ORCHESTRATION_TYPES].sort());
});
