import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parsePipeline, PipelineFileError } from '../../src/contract/pipeline-file.ts';
import { runPipeline, variablesOf, type Step } from '../../src/agent/pipeline-runner.ts';
import { DuckDbWarehouse, type Warehouse } from '../../src/agent/warehouse/index.ts';
import { orchestration, WAITING } from '../helpers/executions.ts';
import {
  EXECUTION_STATUSES,
  IllegalTransition,
  isFinal,
  moveOf,
  TRANSITIONS,
  type ExecutionEvent,
} from '../../src/areas/executions/states.ts';

const GREETING = orchestration(
  `    Start:
      type: "start"
      transitions:
        unconditional:
          - "Print"
    Print:
      type: "print-variables"
      transitions:
        success:
          - "Check"
      parameters:
        variablesToPrint:
          - - "region"
        prefixText: "> "
    Check:
      type: "assert-scalar-variables"
      transitions:
        success:
          - "End Success"
        failure:
          - "End Failure"
      parameters:
        assertions:
          - - "region"
            - "=="
            - "eu"
    End Success:
      type: "end-success"
    End Failure:
      type: "end-failure"
`,
  `  variables:
    region:
      metadata:
        type: "TEXT"
      defaultValue: "us"
`,
);

async function run(text: string, variables: Record<string, string | number> = {}, signal = new AbortController().signal) {
  const reported: Step[] = [];
  const printed: string[] = [];
  const pipeline = parsePipeline(text);
  const outcome = await runPipeline(pipeline, {
    variables: variablesOf(pipeline, variables),
    signal,
    onStep: (step) => {
      reported.push(step);
    },
    print: (line) => printed.push(line),
  });
  return { outcome, reported, printed };
}

describe('pipeline runner', () => {
  test('walks success transitions to end success; each step is reported when it starts and when it ends', async () => {
    const { outcome, reported, printed } = await run(GREETING, { region: 'eu' });
    assert.equal(outcome.status, 'SUCCESS');
    assert.deepEqual(
      outcome.steps.map((step) => [step.index, step.name, step.status]),
      [
        [0, 'Start', 'SUCCESS'],
        [1, 'Print', 'SUCCESS'],
        [2, 'Check', 'SUCCESS'],
        [3, 'End Success', 'SUCCESS'],
      ],
    );
    assert.equal(reported.length, 8);
    assert.deepEqual(
      reported.slice(0, 2).map((step) => step.status),
      ['RUNNING', 'SUCCESS'],
    );
    assert.ok(outcome.steps.every((step) => step.startedAt && step.finishedAt));
    assert.deepEqual(printed, ['> region=eu']);
  });

  test('a failed assertion follows the failure transition to end failure, with a message', async () => {
    // The pipeline's own default (us) applies when the run gives no value.
    const { outcome } = await run(GREETING);
    assert.equal(outcome.status, 'FAILED');
    const check = outcome.steps.find((step) => step.name === 'Check')!;
    assert.equal(check.status, 'FAILED');
    assert.match(check.message!, /region is us, expected == eu/);
    assert.equal(outcome.steps.at(-1)!.name, 'End Failure');
  });

  test('an unsupported component fails its step with a message saying so; with nowhere to go the run fails', async () => {
    const { outcome } = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Load"]
    Load:
      type: "s3-load"
      transitions:
        success: ["Done"]
    Done:
      type: "end-success"
`),
    );
    assert.equal(outcome.status, 'FAILED');
    assert.match(outcome.steps[1].message!, /"s3-load" is not supported/);
    assert.equal(outcome.steps.length, 2);
  });

  test('unconditional transitions run after a failure too; skipped components pass as skipped', async () => {
    const { outcome } = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Bad wait"]
    Bad wait:
      type: "wait"
      parameters:
        seconds: "soon"
      transitions:
        unconditional: ["Skipped"]
    Skipped:
      type: "end-failure"
      skipped: true
      transitions:
        success: ["Fine"]
    Fine:
      type: "end-success"
`),
    );
    assert.deepEqual(
      outcome.steps.map((step) => step.status),
      ['SUCCESS', 'FAILED', 'SKIPPED', 'SUCCESS'],
    );
    assert.equal(outcome.status, 'SUCCESS');
  });

  test('a cancel interrupts a wait at once and stops the run', async () => {
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 50);
    const { outcome } = await run(WAITING, { delay: 30 }, controller.signal);
    assert.ok(Date.now() - started < 5000);
    assert.equal(outcome.status, 'CANCELLED');
    assert.deepEqual(
      outcome.steps.map((step) => [step.name, step.status]),
      [
        ['Start', 'SUCCESS'],
        ['Wait', 'CANCELLED'],
      ],
    );
  });

  test('names every object answers to are not variables, comparators or components unless declared (issue 36)', async () => {
    const { outcome, printed } = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Print", "Check", "Odd"]
    Print:
      type: "print-variables"
      parameters:
        prefixText: "\${constructor}"
    Check:
      type: "assert-scalar-variables"
      parameters:
        assertions:
          - ["region", "constructor", "x"]
          - ["toString", "==", "x"]
    Odd:
      type: "toString"
`),
      { region: 'eu' },
    );
    assert.equal(outcome.status, 'FAILED');
    const [, print, check, odd] = outcome.steps;
    assert.equal(print.status, 'FAILED');
    assert.match(print.message!, /Variable "constructor" is not defined/);
    assert.equal(check.status, 'FAILED');
    assert.match(check.message!, /Unknown comparator "constructor"/);
    assert.equal(odd.status, 'FAILED');
    assert.match(odd.message!, /"toString" is not supported/);
    assert.deepEqual(printed, []);
  });

  test('a pipeline may declare variables named __proto__ or constructor; they are variables like any other', async () => {
    const { outcome, printed } = await run(
      orchestration(
        `    Start:
      type: "start"
      transitions:
        unconditional: ["Print"]
    Print:
      type: "print-variables"
      parameters:
        variablesToPrint:
          - ["__proto__"]
          - ["constructor"]
          - ["type"]
`,
        `  variables:
    __proto__:
      metadata:
        type: "TEXT"
      defaultValue: "p"
    constructor:
      metadata:
        type: "TEXT"
      defaultValue: "c"
    type:
      metadata:
        type: "TEXT"
      defaultValue: "t"
`,
      ),
    );
    assert.equal(outcome.status, 'SUCCESS', outcome.message);
    assert.deepEqual(printed, ['__proto__=p', 'constructor=c', 'type=t']);
    const pipeline = parsePipeline(
      orchestration('    Start:\n      type: "start"\n', '  variables:\n    __proto__:\n      metadata:\n        type: "GRID"\n'),
    );
    assert.ok(Object.hasOwn(pipeline.variables, '__proto__'));
    assert.equal((pipeline.variables as Record<string, unknown>).type, undefined);
  });

  // Start → A and B at once → `and` after both, `or` after the first; A and B each hold a statement open until
  // the other has one open too: run one after another, the first would wait for ever (the barrier fails it).
  const BRANCHES = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["A", "B"]
    A:
      type: "sql-executor"
      parameters:
        sqlScript: "SELECT \${a}"
      transitions:
        success: ["Both", "Either"]
    B:
      type: "sql-executor"
      parameters:
        sqlScript: "SELECT 2"
      transitions:
        success: ["Both", "Either"]
    Both:
      type: "and"
      transitions:
        success: ["End Success"]
    Either:
      type: "or"
    End Success:
      type: "end-success"
`);

  async function branches(a: string) {
    const duckdb = await DuckDbWarehouse.open(':memory:');
    let open = 0;
    let release!: () => void;
    const together = new Promise<void>((resolve) => (release = resolve));
    const warehouse = Object.assign(Object.create(duckdb) as Warehouse, {
      async run(sql: string, signal: AbortSignal) {
        open += 1;
        if (open === 2) release();
        let timer: NodeJS.Timeout | undefined;
        const alone = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('the other branch never ran meanwhile')), 10_000);
        });
        await Promise.race([together, alone]).finally(() => clearTimeout(timer));
        return duckdb.run(sql, signal);
      },
      close: async () => undefined,
    });
    const reported: Step[] = [];
    const pipeline = parsePipeline(BRANCHES);
    try {
      const outcome = await runPipeline(pipeline, {
        variables: variablesOf(pipeline, { a }),
        signal: new AbortController().signal,
        onStep: (step) => void reported.push(step),
        services: { warehouse: async () => warehouse },
      });
      return { outcome, reported };
    } finally {
      await duckdb.close();
    }
  }

  test('two success transitions run both branches at once; `and` joins after both, `or` runs once', async () => {
    const { outcome, reported } = await branches('1');
    assert.equal(outcome.status, 'SUCCESS', outcome.message);
    // Both branches were RUNNING before either ended.
    assert.deepEqual(
      reported.slice(0, 4).map((step) => `${step.name}:${step.status}`),
      ['Start:RUNNING', 'Start:SUCCESS', 'A:RUNNING', 'B:RUNNING'],
    );
    const names = outcome.steps.map((step) => step.name);
    assert.deepEqual(names.slice(0, 3), ['Start', 'A', 'B']);
    assert.deepEqual([...names.slice(3)].sort(), ['Both', 'Either', 'End Success']);
    assert.ok(names.indexOf('End Success') > names.indexOf('Both'));
    assert.deepEqual(
      outcome.steps.map((step) => step.index),
      [0, 1, 2, 3, 4, 5],
    );
    assert.ok(outcome.steps.every((step) => step.status === 'SUCCESS'));
  });

  test('a branch that fails keeps its `and` from running; the other branch still runs; the run fails', async () => {
    const { outcome } = await branches('no_such_column');
    assert.equal(outcome.status, 'FAILED');
    assert.match(outcome.message, /"A" failed: .*no_such_column/);
    assert.deepEqual(
      outcome.steps.map((step) => `${step.name}:${step.status}`),
      ['Start:SUCCESS', 'A:FAILED', 'B:SUCCESS', 'Either:SUCCESS'],
    );
  });

  test('files that cannot run are refused with the reason', () => {
    assert.throws(() => parsePipeline('type: transformation\npipeline:\n  components: {}\n'), PipelineFileError);
    assert.throws(() => parsePipeline('- a\n- b\n'), /no pipeline.components/);
    assert.throws(() => parsePipeline(orchestration('    A:\n      type: "print-variables"\n')), /one start component/);
    assert.throws(
      () => parsePipeline(orchestration('    Start:\n      type: "start"\n      transitions:\n        success: ["Nowhere"]\n')),
      /"Nowhere", which does not exist/,
    );
  });
});

describe('execution state table', () => {
  const events = Object.keys(TRANSITIONS.RUNNING).concat('start', 'decline') as ExecutionEvent[];

  test('every move not in the table is refused, and finished states accept nothing', () => {
    for (const from of ['(none)', ...EXECUTION_STATUSES] as const) {
      for (const event of events) {
        const to = TRANSITIONS[from][event];
        if (to === undefined) assert.throws(() => moveOf(from, event), IllegalTransition, `${from} + ${event}`);
        else assert.equal(moveOf(from, event), to);
      }
    }
    for (const status of ['SUCCESS', 'FAILED', 'CANCELLED', 'FORBIDDEN', 'SKIPPED'] as const) assert.ok(isFinal(status));
    for (const status of ['RUNNING', 'CANCELLING', 'UNKNOWN'] as const) assert.ok(!isFinal(status));
  });

  test('the moves the issue names', () => {
    assert.equal(moveOf('RUNNING', 'cancel'), 'CANCELLING');
    assert.equal(moveOf('CANCELLING', 'agent-cancelled'), 'CANCELLED');
    assert.equal(moveOf('RUNNING', 'force-cancel'), 'CANCELLED');
    assert.equal(moveOf('RUNNING', 'lost-contact'), 'UNKNOWN');
    assert.equal(moveOf('UNKNOWN', 'agent-done'), 'SUCCESS');
    assert.throws(() => moveOf('CANCELLED', 'agent-done'), /finished/);
    assert.throws(() => moveOf('SUCCESS', 'cancel'), IllegalTransition);
  });
});
