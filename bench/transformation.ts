/**
 * Transformation pushdown: a pipeline that joins 1,000,000 orders to 10,000 customers and aggregates them
 * into a table, run through the agent's runner (parse, compile, dispatch to the warehouse adapter) against
 * the same SQL sent directly through the driver, on DuckDB and (with BENCH_POSTGRES_URL) on PostgreSQL.
 * Rounds alternate the two; the median ratio of wall times is the measure (target: at most 1.2).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import pg from 'pg';
import { parsePipelineFile } from '../src/contract/pipeline-file.ts';
import { compileTransformation } from '../src/contract/transformation.ts';
import { runPipeline, variablesOf } from '../src/agent/pipeline-runner.ts';
import { DuckDbWarehouse, PostgresWarehouse, type Warehouse } from '../src/agent/warehouse/index.ts';
import { createDatabase, median, record, ROUNDS } from './lib.ts';

const ORDERS = Number(process.env.BENCH_TRANSFORMATION_ROWS ?? 1_000_000);

const TRANSFORMATION = `type: "transformation"
pipeline:
  components:
    Orders:
      type: "table-input"
      parameters:
        targetTable: "orders"
        columnNames: ["customer_id", "amount"]
    Customers:
      type: "table-input"
      parameters:
        targetTable: "customers"
        columnNames: ["id", "region"]
    Joined:
      type: "join"
      sources: ["Orders", "Customers"]
      parameters:
        mainTable: "Orders"
        mainTableAlias: "o"
        joins: [["Customers", "c", "Inner"]]
        joinExpressions: [["\\"o\\".\\"customer_id\\" = \\"c\\".\\"id\\"", "o_Inner_c"]]
        columnMappings: [["c.region", "region"], ["o.amount", "amount"]]
    Totals:
      type: "aggregate"
      sources: ["Joined"]
      parameters:
        groupings: ["region"]
        aggregations: [["amount", "Sum"], ["amount", "Count"]]
    Out:
      type: "rewrite-table"
      sources: ["Totals"]
      parameters:
        targetTable: "totals"
`;

const ORCHESTRATION = `type: "orchestration"
pipeline:
  components:
    Start:
      type: "start"
      transitions:
        unconditional: ["Transform"]
    Transform:
      type: "run-transformation"
      parameters:
        transformationJob: "totals.tran.yaml"
`;

const LOAD = `CREATE TABLE customers AS SELECT g AS id, 'region ' || (g % 50) AS region FROM generate_series(1, 10000) AS t(g);
CREATE TABLE orders AS SELECT 1 + g % 10000 AS customer_id, (g % 997) * 1.5 AS amount FROM generate_series(1, ${ORDERS}) AS t(g);`;

async function compare(name: string, warehouse: Warehouse, direct: (sql: string) => Promise<void>): Promise<void> {
  const signal = new AbortController().signal;
  await warehouse.run(LOAD, signal);
  const sql = compileTransformation(parsePipelineFile(TRANSFORMATION), { dialect: warehouse.dialect, variables: {} })
    .flatMap((output) => output.statements)
    .join(';\n');
  const kept = Object.assign(Object.create(warehouse) as Warehouse, { close: async () => undefined });
  const orchestration = parsePipelineFile(ORCHESTRATION);
  const ratios: number[] = [];
  for (let round = 0; round < ROUNDS; round += 1) {
    let started = performance.now();
    const outcome = await runPipeline(orchestration, {
      variables: variablesOf(orchestration, {}),
      signal,
      services: { warehouse: async () => kept, pipelines: { 'totals.tran.yaml': TRANSFORMATION } },
    });
    const viaRunner = performance.now() - started;
    if (outcome.status !== 'SUCCESS') throw new Error(`the pipeline failed: ${outcome.message}`);
    started = performance.now();
    await direct(sql);
    const viaDriver = performance.now() - started;
    ratios.push(viaRunner / viaDriver);
    console.log(`${name} round ${round + 1}: runner ${viaRunner.toFixed(0)} ms, driver ${viaDriver.toFixed(0)} ms`);
  }
  const ratio = median(ratios);
  console.log(`${name}: ${ORDERS} rows join + aggregate, runner / driver = ${ratio.toFixed(2)} (median of ${ROUNDS})`);
  record({ name: `transformation pushdown on ${name}: runner / driver`, measured: ratio, atMost: 1.2 });
}

export async function bench(): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-wh-'));
  try {
    const file = path.join(dir, 'bench.duckdb');
    const duck = await DuckDbWarehouse.open(file);
    const connection = await (await DuckDBInstance.fromCache(file)).connect();
    await compare('duckdb', duck, async (sql) => {
      await connection.run(sql);
    });
    connection.closeSync();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  if (!process.env.BENCH_POSTGRES_URL) {
    console.log('postgres: skipped (BENCH_POSTGRES_URL is not set)');
    return;
  }
  const database = await createDatabase();
  const warehouse = new PostgresWarehouse({ connectionString: database.url });
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    await compare('postgres', warehouse, async (sql) => {
      await client.query(sql);
    });
  } finally {
    await client.end();
    await warehouse.close();
    await database.drop();
  }
}
