import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkedArguments, depthOfJsonText, MAX_ARGUMENT_DEPTH } from '../../src/areas/ai-tasks/arguments.ts';
import { turnOf } from '../../src/areas/ai-tasks/model.ts';

function nested(depth: number): unknown {
  let value: unknown = 'leaf';
  for (let level = 0; level < depth; level += 1) value = level % 2 === 0 ? [value] : { a: value };
  return value;
}

test('depth of JSON text counts brackets outside strings only', () => {
  assert.equal(depthOfJsonText('{}'), 1);
  assert.equal(depthOfJsonText('{"a":[{"b":1}]}'), 3);
  assert.equal(depthOfJsonText('{"a":"[[[[[[\\"[[[["}'), 1);
  assert.equal(depthOfJsonText('not json'), 0);
});

test('arguments at the depth bound are kept; one level more is refused with an excerpt', () => {
  const atBound = JSON.stringify(nested(MAX_ARGUMENT_DEPTH));
  assert.equal(depthOfJsonText(atBound), MAX_ARGUMENT_DEPTH);
  assert.deepEqual(checkedArguments(atBound), { value: JSON.parse(atBound) });
  const past = JSON.stringify(nested(MAX_ARGUMENT_DEPTH + 1));
  const refused = checkedArguments(past);
  assert.ok('error' in refused);
  assert.match(refused.error, /nested deeper than 64 levels/);
  assert.ok(refused.excerpt.length <= 1024 + 3);
  assert.deepEqual(checkedArguments('not json'), { value: 'not json' });
  assert.deepEqual(checkedArguments(''), { value: {} });
});

test('a model server that sends arguments as a JSON value nested past what JSON.stringify takes: the call is refused, not the turn', () => {
  const turn = turnOf({
    choices: [{ message: { tool_calls: [{ id: 'c1', function: { name: 'read_file', arguments: nested(200_000) } }] } }],
  });
  assert.equal(turn.toolCalls.length, 1);
  assert.ok('error' in checkedArguments(turn.toolCalls[0].argumentsText));
});
