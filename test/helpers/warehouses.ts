/**
 * Warehouses for agent tests: an embedded DuckDB file in a temporary folder, and (when TEST_DATABASE_URL
 * is set) a PostgreSQL database of the test's own, dropped after.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { describe } from 'node:test';
import pg from 'pg';
import { DuckDbWarehouse, PostgresWarehouse, type Warehouse } from '../../src/agent/warehouse/index.ts';

const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL;

export type WarehouseKind = 'duckdb' | 'postgres';

export function describeEachWarehouse(title: string, suite: (kind: WarehouseKind) => void): void {
  describe(`${title} [duckdb]`, () => suite('duckdb'));
  if (TEST_DATABASE_URL) describe(`${title} [postgres]`, () => suite('postgres'));
  else describe(`${title} [postgres]`, { skip: 'TEST_DATABASE_URL is not set' }, () => {});
}

async function onTestServer(statement: string): Promise<void> {
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(statement);
  } finally {
    await admin.end();
  }
}

export interface ScratchWarehouse {
  warehouse: Warehouse;
  /** For PostgreSQL: the database's URL (an agent process may connect to it). */
  url?: string;
  database?: string;
  dir: string;
  drop(): Promise<void>;
}

export async function scratchWarehouse(kind: WarehouseKind, defaultSchema?: string): Promise<ScratchWarehouse> {
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-wh-'));
  if (kind === 'duckdb') {
    const warehouse = await DuckDbWarehouse.open(path.join(dir, 'test.duckdb'), { schema: defaultSchema });
    return {
      warehouse,
      dir,
      drop: async () => {
        await warehouse.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const database = `dpc_wh_${randomBytes(6).toString('hex')}`;
  await onTestServer(`create database ${database}`);
  const url = new URL(TEST_DATABASE_URL!);
  url.pathname = `/${database}`;
  const warehouse = new PostgresWarehouse({ connectionString: url.toString(), database, defaultSchema });
  return {
    warehouse,
    url: url.toString(),
    database,
    dir,
    drop: async () => {
      await warehouse.close();
      rmSync(dir, { recursive: true, force: true });
      await onTestServer(`drop database if exists ${database} with (force)`);
    },
  };
}
