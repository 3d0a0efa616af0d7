/**
 * Opens the warehouse a run names: the embedded DuckDB file of its account and environment when the run
 * names none, or PostgreSQL with the password read from the agent's vault. Another adapter is one more
 * case here (docs/warehouses.md).
 */
import { ENVIRONMENT_DEFAULT, type WarehouseSpec } from '../../contract/work.ts';
import type { VaultBackend } from '../vault.ts';
import { DuckDbWarehouse, duckdbFile } from './duckdb.ts';
import { PostgresWarehouse } from './postgres.ts';
import { environmentSchema, isolatedWarehouse } from './roles.ts';
import { WarehouseError, type Warehouse } from './warehouse.ts';

export { WarehouseError, type Warehouse, type QueryResult, type Row, type Column } from './warehouse.ts';
export { DuckDbWarehouse, duckdbFile } from './duckdb.ts';
export { PostgresWarehouse } from './postgres.ts';
export { environmentSchema, isolatedWarehouse, rolePassword } from './roles.ts';

export interface WarehouseSite {
  stateDir: string;
  vault: VaultBackend;
  accountId: string;
  environmentId: string;
  /** The longest one statement may run, in ms. */
  statementTimeoutMs?: number;
  /** PostgreSQL for runs that name no warehouse, a schema per account and environment; else DuckDB. */
  defaultWarehouseUrl?: string;
  /**
   * With defaultWarehouseUrl: each account's environment runs as a role of its own that owns its schema
   * only (roles.ts), with the password derived from this key; the URL's own role only sets roles up.
   */
  warehouseRoleKey?: string;
  /** The embedded DuckDB without file system or network access (platform-hosted agents). */
  sandboxed?: boolean;
}

function given(value: string | undefined): string | undefined {
  return value === undefined || value === '' || value === ENVIRONMENT_DEFAULT ? undefined : value;
}

/** The password a vault secret holds: the string itself, or its `password` member. */
async function passwordFrom(vault: VaultBackend, name: string, key: string): Promise<string> {
  const value = await vault.read(name, key);
  if (value === undefined) throw new WarehouseError(`The warehouse secret "${name}" (key "${key}") is not in the agent's vault.`);
  if (typeof value === 'string') return value;
  if (typeof value.password === 'string') return value.password;
  throw new WarehouseError(`The warehouse secret "${name}" (key "${key}") has no password.`);
}

export async function openWarehouse(spec: WarehouseSpec | undefined, site: WarehouseSite): Promise<Warehouse> {
  if (spec === undefined && site.defaultWarehouseUrl && site.warehouseRoleKey) {
    return isolatedWarehouse(site.defaultWarehouseUrl, site.warehouseRoleKey, site);
  }
  if (spec === undefined && site.defaultWarehouseUrl) {
    return new PostgresWarehouse({
      connectionString: site.defaultWarehouseUrl,
      defaultSchema: environmentSchema(site.accountId, site.environmentId),
      statementTimeoutMs: site.statementTimeoutMs,
    });
  }
  if (spec === undefined || spec.type === 'duckdb') {
    return DuckDbWarehouse.open(duckdbFile(site.stateDir, site.accountId, site.environmentId), {
      database: given(spec?.defaultDatabase),
      schema: given(spec?.defaultSchema),
      statementTimeoutMs: site.statementTimeoutMs,
      sandboxed: site.sandboxed === true,
    });
  }
  if (spec.type === 'postgres') {
    const password = spec.secretName ? await passwordFrom(site.vault, spec.secretName, spec.secretKey || 'password') : undefined;
    return new PostgresWarehouse({
      host: spec.host,
      port: spec.port,
      database: given(spec.defaultDatabase) ?? spec.database,
      user: spec.user,
      password,
      defaultSchema: given(spec.defaultSchema),
      statementTimeoutMs: site.statementTimeoutMs,
    });
  }
  throw new WarehouseError(`This agent has no adapter for a warehouse of type "${String((spec as { type: unknown }).type)}".`);
}
