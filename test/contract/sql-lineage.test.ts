import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sqlLineage } from '../../src/contract/sql-lineage.ts';

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
  assert.deepEqual(names(sqlLineage('drop table s.gone', context)?.outputs), []);
});

test('SQL lineage: a statement the parser cannot read gives no lineage rather than a guess', () => {
  assert.equal(sqlLineage('copy orders from stdin', context), undefined);
  assert.equal(sqlLineage('selec * from orders', context), undefined);
});
