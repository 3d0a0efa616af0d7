/**
 * Column lineage of compiled transformations: for each column an output writes, the input table columns it
 * is made from, traced through every operator; nothing guessed where a `sql` query hides its reads.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parsePipelineFile } from '../../src/contract/pipeline-file.ts';
import { compileTransformation, type CompiledOutput } from '../../src/contract/transformation.ts';
import { POSTGRES_DIALECT } from '../../src/contract/sql-dialect.ts';

const FILE = `type: "transformation"
pipeline:
  components:
    Orders:
      type: "table-input"
      parameters:
        schema: "sales"
        targetTable: "orders"
        columnNames: ["id", "customer_id", "amount", "tax", "status", "select"]
    Returns:
      type: "table-input"
      parameters:
        schema: "sales"
        targetTable: "returns"
        columnNames: ["id", "customer_id", "amount"]
    Customers:
      type: "table-input"
      parameters:
        targetTable: "customers"
        columnNames: ["customer_id", "region"]
    Gross:
      type: "calculator"
      sources: ["Orders"]
      parameters:
        includeInputColumns: "Yes"
        calculations:
          - ['"amount" + tax', "gross"]
          - ["'amount' || status", "label"]
          - ['"select" * 2', "doubled"]
          - ["42", "answer"]
    Ranked:
      type: "rank"
      sources: ["Gross"]
      parameters:
        partitionData: ["customer_id"]
        orderingWithinPartitions: [["gross", "Descending"]]
        functions: [["Row Number", "position"]]
    Both:
      type: "unite"
      sources: ["Orders", "Returns"]
      parameters:
        addSourceColumn: "Yes"
    Joined:
      type: "join"
      sources: ["Ranked", "Customers"]
      parameters:
        mainTable: "Ranked"
        mainTableAlias: "r"
        joins: [["Customers", "c", "Inner"]]
        joinExpressions: [['"r"."customer_id" = "c"."customer_id"', "r_Inner_c"]]
        columnMappings: [["r.gross", "gross"], ["c.region", "region"], ["r.position", "position"], ["answer", "answer"]]
    Query:
      type: "sql"
      parameters:
        query: "SELECT region, count(*) AS n FROM customers GROUP BY region"
        columnNames: ["region", "n"]
    Ranked out:
      type: "table-output"
      sources: ["Joined"]
      parameters:
        targetTable: "ranked"
        columnMapping: [["gross", "gross_amount"], ["region", "region"], ["position", "rank"], ["answer", "answer"]]
    United out:
      type: "rewrite-table"
      sources: ["Both"]
      parameters:
        targetTable: "all_movements"
    Merged:
      type: "table-update"
      sources: ["Gross"]
      parameters:
        targetTable: "order_totals"
        joinExpression: '"target"."id" = "input"."id"'
        updateMapping: [["gross", "total"]]
        includeNotMatched: "Yes"
        insertMapping: [["id", "id"], ["gross", "total"], ["label", "label"]]
    Query out:
      type: "rewrite-table"
      sources: ["Query"]
      parameters:
        targetTable: "regions"
`;

function compiled(): Map<string, CompiledOutput> {
  const pipeline = parsePipelineFile(FILE);
  const outputs = compileTransformation(pipeline, { dialect: POSTGRES_DIALECT, variables: {}, defaultSchema: 'public' });
  return new Map(outputs.map((output) => [output.component, output]));
}

/** `schema.table.field` of each origin of each column. */
function named(output: CompiledOutput | undefined) {
  return output?.columnLineage
    ? Object.fromEntries(
        Object.entries(output.columnLineage.columns).map(([column, origins]) => [
          column,
          origins.map((o) => `${o.table.schema}.${o.table.table}.${o.field}`).sort(),
        ]),
      )
    : undefined;
}

test('through calculator, rank, join and a mapped table-output: each written column and the input columns it is made from', () => {
  const ranked = compiled().get('Ranked out');
  assert.deepEqual(ranked?.columnLineage?.target, { database: undefined, schema: 'public', table: 'ranked' });
  assert.deepEqual(named(ranked), {
    // "amount" quoted and tax bare; a string literal's 'amount' names nothing.
    gross_amount: ['sales.orders.amount', 'sales.orders.tax'],
    region: ['public.customers.region'],
    // A window function's value comes from what it partitions and orders by.
    rank: ['sales.orders.amount', 'sales.orders.customer_id', 'sales.orders.tax'],
    // A constant is made from no column.
    answer: [],
  });
});

test('a unite takes each column from every source that has it; table-update maps input to target columns', () => {
  const outputs = compiled();
  assert.deepEqual(named(outputs.get('United out')), {
    id: ['sales.orders.id', 'sales.returns.id'],
    customer_id: ['sales.orders.customer_id', 'sales.returns.customer_id'],
    amount: ['sales.orders.amount', 'sales.returns.amount'],
    tax: ['sales.orders.tax'],
    status: ['sales.orders.status'],
    select: ['sales.orders.select'],
    source_component: [],
  });
  assert.deepEqual(named(outputs.get('Merged')), {
    total: ['sales.orders.amount', 'sales.orders.tax'],
    id: ['sales.orders.id'],
    label: ['sales.orders.status'],
  });
});

test('a sql component hides what it reads: no column lineage is guessed', () => {
  assert.equal(compiled().get('Query out')?.columnLineage, undefined);
});
