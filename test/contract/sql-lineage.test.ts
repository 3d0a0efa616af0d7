import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sqlLineage } from '../../src/contract/sql-lineage.ts';
import { sqlGrammarOf } from '../../src/contract/sql-grammar.ts';

const context = { grammar: 'postgresql', namespace: 'postgres://db:5432', defaultDatabase: 'shop', defaultSchema: 'public' };
const names = (datasets: { name: string }[] | undefined) => datasets?.map((d) => d.name);

test('SQL lineage: what a script reads and writes, names completed from the defaults', () => {
  const ctas = sqlLineage(
    'create table marts.daily as select o.day, sum(o.amount) from orders o join crm.customers c on c.id = o.customer group by 1',
    context,
  );
  assert.deepEqual(names(ctas?.inputs), ['shop.public.orders', 'shop.crm.customers']);
  assert.deepEqual(names(ctas?.outputs), ['shop.marts.daily']);
  assert.equal(ctas?.outputs[0].namespace, 'postgres://db:5432');

  const script = sqlLineage(
    'update s.t set a = 1 from s.u where s.t.id = s.u.id; delete from s.old; insert into "Weird"."select" select * from wh.s.o',
    context,
  );
  assert.deepEqual(names(script?.outputs), ['shop.s.t', 'shop.s.old', 'shop.Weird.select']);
  assert.deepEqual(names(script?.inputs), ['shop.s.u', 'wh.s.o']);

  assert.deepEqual(sqlLineage('select 1', context)?.outputs, []);
  const dropped = sqlLineage('drop table s.gone', context);
  assert.deepEqual([names(dropped?.inputs), names(dropped?.outputs)], [[], []]);
  // A WITH's names are no tables; DuckDB's CREATE OR REPLACE TABLE writes its table.
  const compiled = sqlLineage(
    'CREATE OR REPLACE TABLE "main"."mart" AS WITH "Orders" AS (SELECT a FROM "main"."raw_orders"), "Joined" AS (SELECT * FROM "Orders") SELECT * FROM "Joined"',
    context,
  );
  assert.deepEqual([names(compiled?.inputs), names(compiled?.outputs)], [['shop.main.raw_orders'], ['shop.main.mart']]);
});

test('SQL lineage: a statement the parser cannot read gives no lineage rather than a guess', () => {
  assert.equal(sqlLineage('copy orders from stdin', context), undefined);
  assert.equal(sqlLineage('selec * from orders', context), undefined);
});

test("SQL lineage per warehouse grammar: a dialect's own statement is read in its grammar only, never guessed in another", () => {
  const snowflakeOnly =
    'insert into marts.latest select * from raw.orders qualify row_number() over (partition by id order by at desc) = 1';
  const postgresOnly = "insert into marts.eu select * from raw.orders where region ~ '^eu'";
  const snowflake = { ...context, grammar: sqlGrammarOf('snowflake'), namespace: 'snowflake://acme' };
  const postgres = { ...context, grammar: sqlGrammarOf('postgres') };
  assert.deepEqual(names(sqlLineage(snowflakeOnly, snowflake)?.inputs), ['shop.raw.orders']);
  assert.deepEqual(names(sqlLineage(snowflakeOnly, snowflake)?.outputs), ['shop.marts.latest']);
  assert.equal(sqlLineage(snowflakeOnly, postgres), undefined);
  assert.deepEqual(names(sqlLineage(postgresOnly, postgres)?.outputs), ['shop.marts.eu']);
  assert.equal(sqlLineage(postgresOnly, snowflake), undefined);
  // SQL Server's TOP is T-SQL's, not PostgreSQL's.
  const top = 'insert into dbo.recent select top 10 * from dbo.orders';
  assert.deepEqual(names(sqlLineage(top, { ...context, grammar: sqlGrammarOf('sqlserver') })?.inputs), ['shop.dbo.orders']);
  assert.equal(sqlLineage(top, postgres), undefined);
  // No warehouse declared: the agent's own (DuckDB or PostgreSQL), read as PostgreSQL.
  assert.equal(sqlGrammarOf(undefined), 'postgresql');
  assert.equal(sqlGrammarOf('duckdb'), 'postgresql');
});
