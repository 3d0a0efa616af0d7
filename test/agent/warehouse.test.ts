import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  DuckDbWarehouse,
  environmentSchema,
  isolatedWarehouse,
  openWarehouse,
  PostgresWarehouse,
  rolePassword,
  WarehouseError,
} from '../../src/agent/warehouse/index.ts';
import { LocalFileVault } from '../../src/agent/vault.ts';
import { describeEachWarehouse, scratchWarehouse, type ScratchWarehouse } from '../helpers/warehouses.ts';

const open = () => new AbortController().signal;

describeEachWarehouse('warehouse adapter', (kind) => {
  let scratch: ScratchWarehouse;
  before(async () => {
    scratch = await scratchWarehouse(kind, 'dpc env');
  });
  after(async () => scratch.drop());

  test('runs a script of several statements and queries rows in the default schema', async () => {
    const w = scratch.warehouse;
    await w.run(`CREATE TABLE people (id INTEGER, name VARCHAR); INSERT INTO people VALUES (1, 'ann'), (2, 'bob');`, open());
    const { columns, rows } = await w.query('SELECT count(*) AS n, max(name) AS top FROM people', open());
    assert.deepEqual(columns, ['n', 'top']);
    assert.deepEqual({ ...rows[0] }, { n: 2, top: 'bob' });
    // The table is in the default schema, not elsewhere.
    const listed = await w.listColumns({ schema: 'dpc env', table: 'people' }, open());
    assert.deepEqual(
      listed.map((column) => column.name),
      ['id', 'name'],
    );
  });

  test('quotes identifiers and literals that are keywords or hold quotes', async () => {
    const w = scratch.warehouse;
    const select = w.quoteIdentifier('select');
    const obrien = w.quoteIdentifier(`o'brien "x"`);
    await w.run(`CREATE TABLE ${w.quoteIdentifier('odd table')} (${select} VARCHAR, ${obrien} INTEGER)`, open());
    await w.run(
      `INSERT INTO ${w.quoteIdentifier('odd table')} VALUES (${w.quoteLiteral(`it's "quoted"; --`)}, ${w.quoteLiteral(7)})`,
      open(),
    );
    const { rows } = await w.query(`SELECT ${select}, ${obrien} FROM ${w.quoteIdentifier('odd table')}`, open());
    assert.equal(rows[0].select, `it's "quoted"; --`);
    assert.equal(rows[0][`o'brien "x"`], 7);
    const columns = await w.listColumns({ table: 'odd table' }, open());
    assert.deepEqual(
      columns.map((column) => column.name),
      ['select', `o'brien "x"`],
    );
  });

  test('a warehouse error is a WarehouseError with the warehouse message', async () => {
    await assert.rejects(scratch.warehouse.query('SELECT * FROM no_such_table', open()), (error: Error) => {
      assert.ok(error instanceof WarehouseError);
      assert.match(error.message, /no_such_table/);
      return true;
    });
  });

  test('a cancel interrupts a statement in flight in the warehouse', async () => {
    const controller = new AbortController();
    const long = kind === 'postgres' ? 'SELECT pg_sleep(30)' : 'SELECT count(*) FROM range(100000000000) a';
    const running = scratch.warehouse.query(long, controller.signal);
    setTimeout(() => controller.abort(new Error('cancelled by the test')), 300);
    await assert.rejects(running, /cancelled by the test/);
    // The warehouse still answers afterwards.
    const { rows } = await scratch.warehouse.query('SELECT 1 AS one', open());
    assert.equal(rows[0].one, 1);
  });

  test('a statement past the agent deadline is cancelled in the warehouse and fails its step with a message', async () => {
    const bounded =
      kind === 'postgres'
        ? new PostgresWarehouse({ connectionString: scratch.url, statementTimeoutMs: 300 })
        : await DuckDbWarehouse.open(path.join(scratch.dir, 'test.duckdb'), { statementTimeoutMs: 300 });
    try {
      const long = kind === 'postgres' ? 'SELECT pg_sleep(30)' : 'SELECT count(*) FROM range(100000000000) a';
      await assert.rejects(bounded.query(long, open()), (error: Error) => {
        assert.ok(error instanceof WarehouseError);
        assert.match(error.message, /timeout|deadline/);
        return true;
      });
    } finally {
      if (kind === 'postgres') await bounded.close();
    }
  });

  test('openWarehouse: the embedded file of the account and environment, or PostgreSQL with the password from the vault', async () => {
    const vault = new LocalFileVault(path.join(scratch.dir, 'vault.json'));
    const site = { stateDir: scratch.dir, vault, accountId: 'acct', environmentId: 'env-1' };
    if (kind === 'duckdb') {
      const embedded = await openWarehouse(undefined, site);
      await embedded.run('CREATE TABLE IF NOT EXISTS marker (x INTEGER)', open());
      const again = await openWarehouse({ type: 'duckdb' }, site);
      assert.deepEqual(
        (await again.listColumns({ table: 'marker' }, open())).map((c) => c.name),
        ['x'],
      );
      // Another environment is another database.
      const other = await openWarehouse(undefined, { ...site, environmentId: 'env-2' });
      await assert.rejects(other.listColumns({ table: 'marker' }, open()), WarehouseError);
      return;
    }
    const url = new URL(scratch.url!);
    const spec = {
      type: 'postgres' as const,
      host: url.hostname,
      port: Number(url.port),
      database: scratch.database,
      user: decodeURIComponent(url.username),
      secretName: 'warehouse-login',
      secretKey: 'password',
      defaultSchema: 'acct env',
    };
    await assert.rejects(openWarehouse(spec, site), /"warehouse-login" \(key "password"\) is not in the agent's vault/);
    await vault.write('warehouse-login', 'password', 'not-needed-with-trust', { overwrite: false });
    const warehouse = await openWarehouse(spec, site);
    try {
      await warehouse.run('CREATE TABLE in_env_schema (x INTEGER)', open());
      const { rows } = await warehouse.query(
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'in_env_schema'",
        open(),
      );
      assert.equal(rows[0].table_schema, 'acct env');
    } finally {
      await warehouse.close();
    }
  });
});

describeEachWarehouse('a role per account and environment in a shared PostgreSQL warehouse', (kind) => {
  if (kind !== 'postgres') return;
  let scratch: ScratchWarehouse;
  const roleKey = randomBytes(32).toString('base64');
  const accountA = randomUUID();
  const accountB = randomUUID();
  const env = randomUUID();
  before(async () => {
    scratch = await scratchWarehouse('postgres');
  });
  after(async () => {
    await scratch.drop();
    const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
    await admin.connect();
    for (const account of [accountA, accountB]) await admin.query(`DROP ROLE IF EXISTS "${environmentSchema(account, env)}"`);
    await admin.end();
  });

  test("a schema made before roles is handed to its role with its tables; the other account's is permission denied", async () => {
    const schemaA = environmentSchema(accountA, env);
    // Made by the operator's role, as before accounts had roles of their own.
    await scratch.warehouse.run(`CREATE SCHEMA "${schemaA}"; CREATE TABLE "${schemaA}".kept AS SELECT 1 AS x`, open());
    const a = await isolatedWarehouse(scratch.url!, roleKey, { accountId: accountA, environmentId: env });
    const b = await isolatedWarehouse(scratch.url!, roleKey, { accountId: accountB, environmentId: env });
    try {
      await a.run('INSERT INTO kept VALUES (2)', open());
      assert.deepEqual(
        (await a.query('SELECT current_user AS who, count(*) AS n FROM kept', open())).rows.map((r) => ({ ...r })),
        [{ who: schemaA, n: 2 }],
      );
      await assert.rejects(b.query(`SELECT * FROM "${schemaA}".kept`, open()), {
        name: 'WarehouseError',
        message: `permission denied for schema ${schemaA}`,
      });
      await assert.rejects(b.run('CREATE TABLE public.dropped (x int)', open()), /permission denied for schema public/);
      // The password is the key's: set again by a process that opens the role afresh, the same.
      assert.equal(rolePassword(roleKey, schemaA), rolePassword(roleKey, schemaA));
      assert.notEqual(rolePassword(roleKey, schemaA), rolePassword(randomBytes(32).toString('base64'), schemaA));
    } finally {
      await a.close();
      await b.close();
    }
  });
});
