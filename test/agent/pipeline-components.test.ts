import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { parsePipelineFile, type VariableValues } from '../../src/contract/pipeline-file.ts';
import { runPipeline, variablesOf, type RunServices, type Step } from '../../src/agent/pipeline-runner.ts';
import { runScript } from '../../src/agent/scripts.ts';
import type { Warehouse } from '../../src/agent/warehouse/index.ts';
import { orchestration } from '../helpers/executions.ts';
import { describeEachWarehouse, scratchWarehouse, type ScratchWarehouse } from '../helpers/warehouses.ts';

/** The scratch warehouse, kept open across runs (a run closes what it opened). */
function kept(warehouse: Warehouse): Warehouse {
  return Object.assign(Object.create(warehouse) as Warehouse, { close: async () => undefined });
}

function transformation(components: string, variables = ''): string {
  return `type: "transformation"\nversion: "1.0"\npipeline:\n  components:\n${components}${variables}`;
}

describeEachWarehouse('pipeline components', (kind) => {
  let scratch: ScratchWarehouse;
  before(async () => {
    scratch = await scratchWarehouse(kind);
  });
  after(async () => scratch.drop());

  async function run(
    main: string,
    options: {
      files?: Record<string, string>;
      variables?: VariableValues;
      services?: Partial<RunServices>;
      signal?: AbortSignal;
    } = {},
  ) {
    const steps: Step[] = [];
    const pipeline = parsePipelineFile(main);
    const outcome = await runPipeline(pipeline, {
      variables: variablesOf(pipeline, options.variables ?? {}),
      signal: options.signal ?? new AbortController().signal,
      onStep: (step) => {
        if (step.status !== 'RUNNING') steps.push(step);
      },
      services: {
        warehouse: async () => kept(scratch.warehouse),
        pipelines: options.files ?? {},
        projectVariables: options.variables ?? {},
        ...options.services,
      },
    });
    return { outcome, steps };
  }

  const rows = async (sql: string) => (await scratch.warehouse.query(sql, new AbortController().signal)).rows;

  test('sql-executor loads rows; query-to-scalar reads a value into a variable; an assertion holds on it', async () => {
    const { outcome, steps } = await run(
      orchestration(
        `    Start:
      type: "start"
      transitions:
        unconditional: ["Load"]
    Load:
      type: "sql-executor"
      parameters:
        componentName: "Load"
        sqlScript: |
          CREATE TABLE orders (id INTEGER, region VARCHAR, amount INTEGER);
          INSERT INTO orders SELECT g, CASE WHEN g % 2 = 0 THEN 'EU' ELSE 'US' END, g FROM generate_series(1, 3000) AS t(g);
      transitions:
        success: ["Count"]
    Count:
      type: "query-to-scalar"
      parameters:
        query: "SELECT count(*) AS n FROM orders WHERE region = '\${region}'"
        scalarVariableMapping:
          - ["eu_orders", "n"]
      transitions:
        success: ["Check"]
    Check:
      type: "assert-scalar-variables"
      parameters:
        assertions:
          - ["eu_orders", "==", "1500"]
      transitions:
        success: ["End Success"]
    End Success:
      type: "end-success"
`,
        `  variables:
    region:
      metadata: {type: "TEXT", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: "EU"
    eu_orders:
      metadata: {type: "NUMBER", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: 0
`,
      ),
    );
    assert.equal(outcome.status, 'SUCCESS', outcome.message);
    assert.equal(steps.find((s) => s.name === 'Count')!.message, 'eu_orders=1500');
  });

  test('a warehouse error fails its step with the warehouse message only, and the run fails', async () => {
    const { outcome, steps } = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Broken"]
    Broken:
      type: "sql-executor"
      parameters:
        sqlScript: "SELECT * FROM no_such_table_here"
`),
    );
    assert.equal(outcome.status, 'FAILED');
    const failed = steps.find((s) => s.name === 'Broken')!;
    assert.equal(failed.status, 'FAILED');
    assert.match(failed.message!, /no_such_table_here/);
    assert.doesNotMatch(failed.message!, /\n\s+at /);
  });

  test('create-table-v2 and truncate-table; identifiers that are keywords or hold quotes', async () => {
    const { outcome } = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Create"]
    Create:
      type: "create-table-v2"
      parameters:
        createMethod: "Replace"
        database: "[Environment Default]"
        schema: "[Environment Default]"
        newTableName: "o'brien table"
        columns:
          - ["select", "VARCHAR", "20", "", "", "Yes", "No"]
          - ["o'brien", "NUMBER", "10", "2", "", "No", "No"]
      transitions:
        success: ["Fill"]
    Fill:
      type: "sql-executor"
      parameters:
        sqlScript: "INSERT INTO \\"o'brien table\\" VALUES ('a', 1.5), ('b', 2)"
      transitions:
        success: ["Truncate"]
    Truncate:
      type: "truncate-table"
      parameters:
        tablesToTruncate: ["o'brien table"]
`),
    );
    assert.equal(outcome.status, 'SUCCESS', outcome.message);
    assert.deepEqual(await rows(`SELECT count(*) AS n FROM "o'brien table"`), [Object.assign(Object.create(null), { n: 0 })]);
    const columns = await scratch.warehouse.listColumns({ table: "o'brien table" }, new AbortController().signal);
    assert.deepEqual(
      columns.map((c) => c.name),
      ['select', "o'brien"],
    );
  });

  const TRANSFORM = transformation(
    `    Customers:
      type: "table-input"
      parameters:
        database: "[Environment Default]"
        schema: "[Environment Default]"
        targetTable: "tx_customers"
        columnNames: ["id", "select", "o'brien"]
    Orders:
      type: "table-input"
      parameters:
        targetTable: "tx_orders"
        columnNames: ["customer_id", "amount", "region"]
    EU only:
      type: "filter"
      sources: ["Orders"]
      parameters:
        filterConditions:
          - ["region", "Is", "Equal to", "\${region}"]
        combineCondition: "And"
    Doubled:
      type: "calculator"
      sources: ["EU only"]
      parameters:
        includeInputColumns: "Yes"
        calculations:
          - ["\\"amount\\" * 2", "double amount"]
    Joined:
      type: "join"
      sources: ["Doubled", "Customers"]
      parameters:
        mainTable: "Doubled"
        mainTableAlias: "o"
        joins:
          - ["Customers", "c", "Inner"]
        joinExpressions:
          - ["\\"o\\".\\"customer_id\\" = \\"c\\".\\"id\\"", "o_Inner_c"]
        columnMappings:
          - ["c.select", "select"]
          - ["c.o'brien", "o'brien"]
          - ["o.double amount", "double amount"]
    Totals:
      type: "aggregate"
      sources: ["Joined"]
      parameters:
        groupings: ["select", "o'brien"]
        aggregations:
          - ["double amount", "Sum"]
          - ["double amount", "Count"]
    Ranked:
      type: "rank"
      sources: ["Totals"]
      parameters:
        includeInputColumns: "Yes"
        partitionData: []
        orderingWithinPartitions:
          - ["sum_double amount", "Descending"]
        functions:
          - ["Dense Rank", "position"]
    Renamed:
      type: "rename"
      sources: ["Ranked"]
      parameters:
        includeInputColumns: "Yes"
        columnMapping:
          - ["sum_double amount", "total"]
    Typed:
      type: "convert-type"
      sources: ["Renamed"]
      parameters:
        conversions:
          - ["total", "NUMBER", "18", "0"]
    Mart:
      type: "rewrite-table"
      sources: ["Typed"]
      parameters:
        targetTable: "tx_mart"
    Regions:
      type: "distinct"
      sources: ["Orders"]
      parameters:
        distinctColumns: ["region"]
    Both:
      type: "unite"
      sources: ["Regions", "Extra"]
      parameters:
        addSourceColumn: "Yes"
    Extra:
      type: "sql"
      parameters:
        query: "SELECT 'APAC' AS region"
        columnNames: ["region"]
    Region list:
      type: "table-output"
      sources: ["Both"]
      parameters:
        targetTable: "tx_regions"
        truncate: "Truncate"
        columnMapping:
          - ["region", "region"]
          - ["source_component", "origin"]
`,
    `  variables:
    region:
      metadata: {type: "TEXT", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: "US"
`,
  );

  test('run-transformation compiles the graph to SQL that runs in the warehouse: every operator, quoting, variables from the parent', async () => {
    const w = scratch.warehouse;
    await w.run(
      `CREATE TABLE tx_customers (id INTEGER, "select" VARCHAR, "o'brien" VARCHAR);
       INSERT INTO tx_customers VALUES (1, 'from', 'x''y'), (2, 'where', 'z'), (3, 'unused', 'q');
       CREATE TABLE tx_orders (customer_id INTEGER, amount INTEGER, region VARCHAR);
       INSERT INTO tx_orders VALUES (1, 10, 'EU'), (1, 5, 'EU'), (2, 7, 'EU'), (2, 100, 'US'), (3, 1, 'US');
       CREATE TABLE tx_regions (region VARCHAR, origin VARCHAR);
       INSERT INTO tx_regions VALUES ('stale', 'old');`,
      new AbortController().signal,
    );
    const { outcome, steps } = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Transform"]
    Transform:
      type: "run-transformation"
      parameters:
        transformationJob: "marts/sales.tran.yaml"
        setScalarVariables:
          - ["region", "EU"]
`),
      { files: { 'marts/sales.tran.yaml': TRANSFORM } },
    );
    assert.equal(outcome.status, 'SUCCESS', `${outcome.message} ${JSON.stringify(steps)}`);
    const outputs = steps.filter((s) => s.childPipeline === 'marts/sales.tran.yaml');
    assert.deepEqual(outputs.map((s) => s.name).sort(), ['Mart', 'Region list']);
    const mart = await rows(
      `SELECT "select", "o'brien", total, "count_double amount" AS n, position FROM tx_mart ORDER BY position`,
    );
    assert.deepEqual(
      mart.map((r) => ({ ...r })),
      [
        { select: 'from', "o'brien": "x'y", total: 30, n: 2, position: 1 },
        { select: 'where', "o'brien": 'z', total: 14, n: 1, position: 2 },
      ],
    );
    const regions = await rows('SELECT region, origin FROM tx_regions ORDER BY region');
    assert.deepEqual(
      regions.map((r) => ({ ...r })),
      [
        { region: 'APAC', origin: 'Extra' },
        { region: 'EU', origin: 'Regions' },
        { region: 'US', origin: 'Regions' },
      ],
    );
  });

  test('table-update merges the input into the target: matched rows updated, others inserted', async () => {
    const w = scratch.warehouse;
    await w.run(
      `CREATE TABLE tu_target (id INTEGER, name VARCHAR); INSERT INTO tu_target VALUES (1, 'old');
       CREATE TABLE tu_source (id INTEGER, name VARCHAR); INSERT INTO tu_source VALUES (1, 'new'), (2, 'added');`,
      new AbortController().signal,
    );
    const { outcome } = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Merge"]
    Merge:
      type: "run-transformation"
      parameters:
        transformationJob: "merge"
`),
      {
        files: {
          'merge.tran.yaml': transformation(`    Source:
      type: "table-input"
      parameters:
        targetTable: "tu_source"
        columnNames: ["id", "name"]
    Update:
      type: "table-update"
      sources: ["Source"]
      parameters:
        targetTable: "tu_target"
        targetAlias: "target"
        sourceAlias: "input"
        joinExpression: "\\"target\\".\\"id\\" = \\"input\\".\\"id\\""
        whenMatched:
          - ["", "Update"]
        updateMapping:
          - ["name", "name"]
        includeNotMatched: "Yes"
        insertMapping:
          - ["id", "id"]
          - ["name", "name"]
`),
        },
      },
    );
    assert.equal(outcome.status, 'SUCCESS', outcome.message);
    assert.deepEqual(
      (await rows('SELECT id, name FROM tu_target ORDER BY id')).map((r) => ({ ...r })),
      [
        { id: 1, name: 'new' },
        { id: 2, name: 'added' },
      ],
    );
  });

  test('iterators: fixed (sequential and concurrent), grid and table; each iteration a step with COPIED variables', async () => {
    await scratch.warehouse.run('CREATE TABLE it_log (source VARCHAR, value VARCHAR)', new AbortController().signal);
    const insert = (source: string) => `      type: "sql-executor"
      parameters:
        sqlScript: "INSERT INTO it_log VALUES ('${source}', '\${item}')"`;
    const { outcome, steps } = await run(
      orchestration(
        `    Start:
      type: "start"
      transitions:
        unconditional: ["Fixed"]
    Fixed:
      type: "fixed-iterator"
      iterationTarget: "Insert fixed"
      parameters:
        concurrency: "Sequential"
        variablesToIterate: ["item"]
        iterationValues: [["a"], ["b"], ["c"]]
      transitions:
        success: ["Concurrent"]
    Insert fixed:
${insert('fixed')}
    Concurrent:
      type: "fixed-iterator"
      iterationTarget: "Insert concurrent"
      parameters:
        concurrency: "Concurrent"
        maxConcurrency: 2
        variablesToIterate: ["item"]
        iterationValues: [["1"], ["2"], ["3"], ["4"], ["5"]]
      transitions:
        success: ["Grid"]
    Insert concurrent:
${insert('concurrent')}
    Grid:
      type: "grid-iterator"
      iterationTarget: "Insert grid"
      parameters:
        gridVariable: "pairs"
        gridIteratorVariableMapping:
          - ["label", "item"]
      transitions:
        success: ["Table"]
    Insert grid:
${insert('grid')}
    Table:
      type: "table-iterator"
      iterationTarget: "Insert table"
      parameters:
        targetTable: "it_log"
        columnMapping:
          - ["value", "item"]
        orderBy:
          - ["value", "Ascending"]
      transitions:
        success: ["Check"]
    Insert table:
${insert('table')}
    Check:
      type: "assert-scalar-variables"
      parameters:
        assertions:
          - ["item", "==", "unchanged"]
`,
        `  variables:
    item:
      metadata: {type: "TEXT", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: "unchanged"
    pairs:
      metadata:
        type: "GRID"
        scope: "COPIED"
        visibility: "PUBLIC"
        columns:
          key: {columnType: "NUMBER"}
          label: {columnType: "TEXT"}
      defaultValue:
        - ["1", "x"]
        - ["2", "y"]
`,
      ),
    );
    assert.equal(outcome.status, 'SUCCESS', `${outcome.message} ${JSON.stringify(steps.filter((s) => s.status === 'FAILED'))}`);
    const count = async (source: string) =>
      (await rows(`SELECT value FROM it_log WHERE source = '${source}' ORDER BY value`)).map((r) => r.value);
    assert.deepEqual(await count('fixed'), ['a', 'b', 'c']);
    assert.deepEqual(await count('concurrent'), ['1', '2', '3', '4', '5']);
    assert.deepEqual(await count('grid'), ['x', 'y']);
    // The table iterator read the 10 rows there when it started.
    assert.equal((await count('table')).length, 10);
    assert.equal(steps.filter((s) => s.name === 'Insert concurrent').length, 5);
    assert.match(steps.find((s) => s.name === 'Insert fixed')!.message!, /iteration 1 \(item=a\)/);
  });

  test('run-orchestration passes PUBLIC variables to the child, whose steps are reported with childPipeline; PRIVATE ones are refused', async () => {
    const child = orchestration(
      `    Start:
      type: "start"
      transitions:
        unconditional: ["Check"]
    Check:
      type: "assert-scalar-variables"
      parameters:
        assertions:
          - ["limit", "==", "42"]
          - ["tag", "==", "from parent"]
`,
      `  variables:
    limit:
      metadata: {type: "NUMBER", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: 1
    tag:
      metadata: {type: "TEXT", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: "child default"
    secret_mode:
      metadata: {type: "TEXT", scope: "COPIED", visibility: "PRIVATE"}
      defaultValue: "off"
`,
    );
    const parent = (rows: string) =>
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Child"]
    Child:
      type: "run-orchestration"
      parameters:
        orchestrationJob: "jobs/child"
        setScalarVariables:
${rows}
`);
    const good = await run(parent(`          - ["limit", "42"]\n          - ["tag", "from \${who}"]`), {
      files: { 'jobs/child.orch.yaml': child },
      variables: { who: 'parent' },
    });
    assert.equal(good.outcome.status, 'SUCCESS', good.outcome.message);
    const childSteps = good.steps.filter((s) => s.childPipeline === 'jobs/child.orch.yaml');
    assert.deepEqual(
      childSteps.map((s) => s.name),
      ['Start', 'Check'],
    );
    // The step running the child names it (runsPipeline), and the child's steps name that step (parentStep):
    // the child's run in lineage.
    const invoking = good.steps.find((s) => s.name === 'Child')!;
    assert.equal(invoking.runsPipeline, 'jobs/child.orch.yaml');
    assert.deepEqual(
      childSteps.map((s) => s.parentStep),
      [invoking.index, invoking.index],
    );
    assert.equal(good.steps.find((s) => s.name === 'Start' && s.childPipeline === undefined)!.runsPipeline, undefined);
    const refused = await run(parent(`          - ["secret_mode", "on"]`), { files: { 'jobs/child.orch.yaml': child } });
    assert.equal(refused.outcome.status, 'FAILED');
    const failed = refused.steps.find((s) => s.name === 'Child')!;
    assert.match(failed.message!, /PRIVATE/);
    // Refused before it ran: it ran no child pipeline (no child run in lineage).
    assert.equal(failed.runsPipeline, undefined);
  });

  test('if routes on a condition; and waits for both branches; retry runs its component again until it succeeds', async () => {
    // A sequence: its value survives the failed attempt's rollback (PostgreSQL runs a script as one transaction).
    await scratch.warehouse.run('CREATE SEQUENCE retry_seq', new AbortController().signal);
    const { outcome, steps } = await run(
      orchestration(
        `    Start:
      type: "start"
      transitions:
        unconditional: ["Big?", "Side"]
    Big?:
      type: "if"
      parameters:
        condition:
          - ["size", "Is", "Greater than", "10"]
        combineConditions: "And"
      transitions:
        "true": ["Join"]
        "false": ["Never"]
    Side:
      type: "print-variables"
      transitions:
        success: ["Join"]
    Never:
      type: "end-failure"
    Join:
      type: "and"
      transitions:
        unconditional: ["Retry"]
    Retry:
      type: "retry"
      iterationTarget: "Flaky"
      parameters:
        numberOfRetries: 3
        retryDelay: 0
      transitions:
        success: ["End Success"]
    Flaky:
      type: "sql-executor"
      parameters:
        sqlScript: "SELECT CAST(CASE WHEN nextval('retry_seq') < 3 THEN 'not yet' ELSE '1' END AS INTEGER)"
    End Success:
      type: "end-success"
`,
        `  variables:
    size:
      metadata: {type: "NUMBER", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: 11
`,
      ),
    );
    assert.equal(outcome.status, 'SUCCESS', `${outcome.message} ${JSON.stringify(steps)}`);
    assert.equal(steps.filter((s) => s.name === 'Join').length, 1);
    assert.ok(!steps.some((s) => s.name === 'Never'));
    const attempts = steps.filter((s) => s.name === 'Flaky');
    assert.deepEqual(
      attempts.map((s) => s.status),
      ['FAILED', 'FAILED', 'SUCCESS'],
    );
  });

  test('a cancel mid-statement cancels it in the warehouse and the run ends CANCELLED', async () => {
    const controller = new AbortController();
    const long = kind === 'postgres' ? 'SELECT pg_sleep(60)' : 'SELECT count(*) FROM range(100000000000) a, range(10) b';
    const started = Date.now();
    const running = run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Long"]
    Long:
      type: "sql-executor"
      parameters:
        sqlScript: "${long}"
      transitions:
        success: ["After"]
    After:
      type: "end-success"
`),
      { signal: controller.signal },
    );
    setTimeout(() => controller.abort(new Error('cancelled')), 300);
    const { outcome, steps } = await running;
    assert.equal(outcome.status, 'CANCELLED');
    assert.equal(steps.find((s) => s.name === 'Long')!.status, 'CANCELLED');
    assert.ok(!steps.some((s) => s.name === 'After'));
    assert.ok(Date.now() - started < 30_000, 'the statement did not run to its end');
    if (kind === 'postgres') {
      // Nothing of the run is still running on the server.
      const active = await rows(
        `SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%' AND state = 'active'`,
      );
      assert.equal(active[0].n, 0);
    }
  });

  test('scripts run with the variables in their environment where allowed, and fail by name where not', async () => {
    const pipeline = orchestration(
      `    Start:
      type: "start"
      transitions:
        unconditional: ["Script"]
    Script:
      type: "bash-script"
      parameters:
        script: "echo \\"hello $who\\"; echo to-stderr >&2"
        timeout: 10
`,
      `  variables:
    who:
      metadata: {type: "TEXT", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: "world"
`,
    );
    const allowed = await run(pipeline, { services: { runScript } });
    assert.equal(allowed.outcome.status, 'SUCCESS', allowed.outcome.message);
    assert.equal(allowed.steps.find((s) => s.name === 'Script')!.message, 'hello world\nto-stderr');
    const refused = await run(pipeline);
    assert.equal(refused.outcome.status, 'FAILED');
    assert.match(refused.steps.find((s) => s.name === 'Script')!.message!, /scripts are not allowed on this agent/);
    const slow = await run(
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Slow"]
    Slow:
      type: "bash-script"
      parameters:
        script: "sleep 30"
        timeout: 1
`),
      { services: { runScript } },
    );
    assert.equal(slow.outcome.status, 'FAILED');
    assert.match(slow.steps.find((s) => s.name === 'Slow')!.message!, /timeout of 1 s/);
  });
});
