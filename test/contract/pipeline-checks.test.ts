import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkPipeline,
  checkPipelines,
  childPipelines,
  describeViolation,
  pipelinesRunBy,
  type ParsedFiles,
} from '../../src/contract/pipeline-checks.ts';
import { errorsBeforeRun } from '../../src/areas/reviews/index.ts';

/** An orchestration whose Start runs each of `children` (by name) in turn. */
function runs(...children: string[]): string {
  const names = children.map((_, i) => `Run ${i}`);
  const components = children.map(
    (child, i) =>
      `    Run ${i}:\n      type: run-orchestration\n${i + 1 < children.length ? `      transitions:\n        success: ["Run ${i + 1}"]\n` : ''}      parameters:\n        orchestrationJob: "${child}"\n`,
  );
  const start = `    Start:\n      type: start\n${names.length ? `      transitions:\n        unconditional: ["${names[0]}"]\n` : ''}`;
  return `type: orchestration\npipeline:\n  components:\n${start}${components.join('')}`;
}

test('a graph of files each running the next twice is checked once per file, not 2^depth times', () => {
  const files: Record<string, string> = {};
  const depth = 40;
  for (let i = 0; i < depth; i += 1) files[`l${i}.orch.yaml`] = runs(`l${i + 1}`, `l${i + 1}`);
  // The last one is missing a required parameter, found once.
  files[`l${depth}.orch.yaml`] =
    `type: orchestration\npipeline:\n  components:\n    Start:\n      type: start\n      transitions:\n        unconditional: [Broken]\n    Broken:\n      type: sql-executor\n      parameters: {}\n`;
  const violations = checkPipeline('l0.orch.yaml', files).map(describeViolation);
  assert.deepEqual(violations, [`l${depth}.orch.yaml: components.Broken.parameters.sqlScript: required`]);
  assert.deepEqual(checkPipelines(Object.keys(files), files).map(describeViolation), violations);
});

test('a cycle of pipelines is named on each of its files; a pipeline running itself too', () => {
  const files = { 'a.orch.yaml': runs('b'), 'b.orch.yaml': runs('c'), 'c.orch.yaml': runs('a'), 'self.orch.yaml': runs('self') };
  const expected = [
    'a.orch.yaml: components.Run 0.parameters.orchestrationJob: pipelines run each other in a cycle: a.orch.yaml → b.orch.yaml → c.orch.yaml → a.orch.yaml',
    'b.orch.yaml: components.Run 0.parameters.orchestrationJob: pipelines run each other in a cycle: b.orch.yaml → c.orch.yaml → a.orch.yaml → b.orch.yaml',
    'c.orch.yaml: components.Run 0.parameters.orchestrationJob: pipelines run each other in a cycle: c.orch.yaml → a.orch.yaml → b.orch.yaml → c.orch.yaml',
  ];
  assert.deepEqual(checkPipeline('a.orch.yaml', files).map(describeViolation).sort(), expected);
  assert.deepEqual(checkPipelines(Object.keys(files), files).map(describeViolation).sort(), [
    ...expected,
    'self.orch.yaml: components.Run 0.parameters.orchestrationJob: pipelines run each other in a cycle: self.orch.yaml → self.orch.yaml',
  ]);
});

test('a long chain of child pipelines is walked without running out of stack', () => {
  const files: Record<string, string> = {};
  const length = 20_000;
  for (let i = 0; i < length; i += 1) files[`p${i}.orch.yaml`] = runs(`p${i + 1}`);
  files[`p${length}.orch.yaml`] = runs('p0');
  const violations = checkPipelines(Object.keys(files), files);
  assert.equal(violations.length, length + 1, 'the cycle through every file is named on each');
});

test('the pipelines a run reaches: each once, through long chains, not past a file that cannot be read', () => {
  const files: Record<string, string> = {};
  for (let i = 0; i < 20_000; i += 1) files[`p${i}.orch.yaml`] = runs(`p${i + 1}`, `p${i + 1}`);
  files['p20000.orch.yaml'] = 'pipeline: [';
  files['unused.orch.yaml'] = runs();
  const reached = pipelinesRunBy('p0.orch.yaml', files);
  assert.equal(reached.length, 20_001);
  assert.ok(!reached.includes('unused.orch.yaml'));
});

test('one map of parsed files is read by every check of a run start: a file it holds is not parsed again', async () => {
  const files: Record<string, string> = {
    'root.orch.yaml': runs('child', 'gone'),
    // A child with a missing parameter (a violation) that runs a transformation.
    'child.orch.yaml': `type: orchestration\npipeline:\n  components:\n    Start:\n      type: start\n      transitions:\n        unconditional: [Query, Load]\n    Query:\n      type: sql-executor\n      parameters: {}\n    Load:\n      type: run-transformation\n      parameters:\n        transformationJob: "load"\n`,
    'load.tran.yaml': `type: transformation\npipeline:\n  components:\n    Read:\n      type: table-input\n      parameters:\n        targetTable: "t"\n`,
    'other.orch.yaml': runs(),
  };
  const paths = new Set(Object.keys(files));
  const context = { projectVariables: new Set<string>(), sqlDialect: 'postgresql' };
  const everything = async (from: Record<string, string>, parsed: ParsedFiles) => ({
    reached: pipelinesRunBy('root.orch.yaml', from, parsed).sort(),
    children: childPipelines('child.orch.yaml', from, paths, parsed),
    violations: checkPipeline('root.orch.yaml', from, parsed).map(describeViolation),
    errors: await errorsBeforeRun('root.orch.yaml', from, context, parsed),
  });
  const parsed: ParsedFiles = new Map();
  const first = await everything(files, parsed);
  assert.deepEqual(first.reached, ['child.orch.yaml', 'load.tran.yaml', 'root.orch.yaml']);
  assert.deepEqual(first.children, { paths: ['load.tran.yaml'], throughVariables: false });
  assert.ok(first.violations.includes('child.orch.yaml: components.Query.parameters.sqlScript: required'));
  assert.ok(first.errors.length > 0, 'the review finds the errors too');
  assert.deepEqual([...parsed.keys()].sort(), first.reached, 'each file reached is parsed into the map');
  // Every text made unreadable: answered from the map all the same, so nothing was parsed again.
  const unreadable = Object.fromEntries(Object.keys(files).map((path) => [path, 'pipeline: [']));
  assert.deepEqual(await everything(unreadable, parsed), first);
  // Without the map the same texts are what they are: unreadable (so the comparison above can fail).
  assert.throws(() => checkPipeline('root.orch.yaml', unreadable));
});
