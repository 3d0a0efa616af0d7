/**
 * Accounts kept apart in one shared PostgreSQL warehouse database (the platform-hosted agents' default
 * warehouse, DPC_HOSTED_WAREHOUSE_URL): each account's environment gets a LOGIN role of its own that owns
 * its schema and nothing else, and the run's statements connect as that role. Another account's schema
 * is then "permission denied": the role has no USAGE on it and no way back to the operator's role (it
 * logged in as itself; there is no RESET ROLE to an operator it never was).
 *
 * The operator's URL is used only here, to create the role and its schema (its role needs CREATEROLE and
 * ownership of the database, or to be a superuser). The role's password is derived from a key the server
 * hands its hosted agents (DPC_AGENT_WAREHOUSE_ROLE_KEY, itself derived from the server's encryption key):
 * every server instance's agent computes the same password, and none is kept anywhere. Each agent process
 * sets it once per role when it first opens that role's warehouse, so a rotated key takes over.
 */
import { createHmac } from 'node:crypto';
import pg from 'pg';
import { POSTGRES_DIALECT } from '../../contract/sql-dialect.ts';
import { PostgresWarehouse } from './postgres.ts';
import { WarehouseError } from './warehouse.ts';

/** The longest name PostgreSQL keeps (NAMEDATALEN - 1); longer ones it cuts to this silently. */
const MAX_NAME = 63;

/** The schema of an account's environment in a shared warehouse database: lower-case word characters. */
export function environmentSchema(accountId: string, environmentId: string): string {
  return `dpc_${accountId}_${environmentId}`
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '_')
    .slice(0, MAX_NAME);
}

/** The password of `role`: an HMAC of its name under the role key, as text PostgreSQL takes in a literal. */
export function rolePassword(roleKey: string, role: string): string {
  return createHmac('sha256', Buffer.from(roleKey, 'base64')).update(`warehouse role ${role}`).digest('base64url');
}

const quote = (name: string) => POSTGRES_DIALECT.quoteIdentifier(name);
const literal = (value: string) => POSTGRES_DIALECT.quoteLiteral(value);

/** Roles this process has set up: each once (its password set, its schema made and owned). */
const ready = new Map<string, Promise<void>>();

/**
 * Creates (or brings up to date) `role` with `password` and its schema of the same name, owned by it,
 * on the operator's connection. A schema made before accounts had roles (owned by the operator) is handed
 * to the role with everything in it. Serialised across processes by an advisory lock on the role's name.
 */
async function setUpRole(adminUrl: string, role: string, password: string): Promise<void> {
  const admin = new pg.Client({ connectionString: adminUrl });
  try {
    await admin.connect();
    await admin.query('BEGIN');
    await admin.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`dpc warehouse role ${role}`]);
    const exists = (await admin.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role])).rowCount === 1;
    // No CREATEDB, CREATEROLE, INHERIT of anything, or membership: the role can reach its schema only.
    await admin.query(
      `${exists ? 'ALTER' : 'CREATE'} ROLE ${quote(role)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION PASSWORD ${literal(password)}`,
    );
    await admin.query(`GRANT CONNECT ON DATABASE ${quote(await currentDatabase(admin))} TO ${quote(role)}`);
    await admin.query(`CREATE SCHEMA IF NOT EXISTS ${quote(role)} AUTHORIZATION ${quote(role)}`);
    const { rows } = await admin.query<{ owner: string }>(
      'SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = $1',
      [role],
    );
    if (rows[0]?.owner !== role) {
      await admin.query(`ALTER SCHEMA ${quote(role)} OWNER TO ${quote(role)}`);
      const owned = await admin.query<{ name: string; kind: string }>(
        `SELECT c.relname AS name, c.relkind AS kind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')`,
        [role],
      );
      for (const object of owned.rows) {
        const what = { r: 'TABLE', p: 'TABLE', v: 'VIEW', m: 'MATERIALIZED VIEW', S: 'SEQUENCE', f: 'FOREIGN TABLE' }[
          object.kind as 'r'
        ];
        await admin.query(`ALTER ${what} ${quote(role)}.${quote(object.name)} OWNER TO ${quote(role)}`);
      }
    }
    // Nothing of it is anyone else's: no grants to PUBLIC on the schema.
    await admin.query(`REVOKE ALL ON SCHEMA ${quote(role)} FROM PUBLIC`);
    await admin.query('COMMIT');
  } catch (error) {
    await admin.query('ROLLBACK').catch(() => undefined);
    throw new WarehouseError(
      `Could not set up the warehouse role of this environment: ${error instanceof Error ? error.message : String(error)}`,
    );
  } finally {
    await admin.end().catch(() => undefined);
  }
}

async function currentDatabase(client: pg.Client): Promise<string> {
  return (await client.query<{ name: string }>('SELECT current_database() AS name')).rows[0].name;
}

/**
 * The warehouse of an account's environment in the shared database at `adminUrl`, connected as the
 * environment's own role (set up on first use in this process).
 */
export async function isolatedWarehouse(
  adminUrl: string,
  roleKey: string,
  site: { accountId: string; environmentId: string; statementTimeoutMs?: number },
): Promise<PostgresWarehouse> {
  const role = environmentSchema(site.accountId, site.environmentId);
  const password = rolePassword(roleKey, role);
  let setUp = ready.get(role);
  if (!setUp) {
    setUp = setUpRole(adminUrl, role, password);
    ready.set(role, setUp);
    setUp.catch(() => ready.delete(role));
  }
  await setUp;
  const url = new URL(adminUrl);
  url.username = role; // both are word characters and '-': nothing to escape
  url.password = password;
  return new PostgresWarehouse({
    connectionString: url.toString(),
    defaultSchema: role,
    schemaExists: true,
    statementTimeoutMs: site.statementTimeoutMs,
  });
}
