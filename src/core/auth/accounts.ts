import { randomUUID } from 'node:crypto';
import type { Db, Executor } from '../db/database.ts';
import { now } from '../db/database.ts';
import { hashSecret, newClientSecret } from './secrets.ts';

export const ROLES = ['viewer', 'developer', 'admin'] as const;
export type Role = (typeof ROLES)[number];

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}

/** Whether a caller of role `held` may do what needs role `needed`. */
export function roleAllows(held: Role, needed: Role): boolean {
  return ROLES.indexOf(held) >= ROLES.indexOf(needed);
}

export interface ClientCredentials {
  clientId: string;
  clientSecret: string;
}

/**
 * A new client id and secret with the secret's hash. Hashing takes tens of milliseconds on purpose: it is
 * done before the transaction that stores it, which would otherwise hold the store (and on SQLite the
 * commit of every transaction grouped with it) for that long.
 */
async function newCredentials(): Promise<ClientCredentials & { secretHash: string }> {
  const clientSecret = newClientSecret();
  return { clientId: randomUUID(), clientSecret, secretHash: await hashSecret(clientSecret) };
}

async function insertClient(
  db: Executor,
  accountId: string,
  role: Role,
  name: string,
  { clientId, clientSecret, secretHash }: ClientCredentials & { secretHash: string },
): Promise<ClientCredentials> {
  const account = await db.selectFrom('accounts').select('id').where('id', '=', accountId).executeTakeFirst();
  if (!account) throw new Error(`account ${accountId} does not exist`);
  await db.insertInto('apiClients').values({ id: clientId, accountId, name, role, secretHash, createdAt: now() }).execute();
  return { clientId, clientSecret };
}

export async function createClient(
  db: Executor,
  accountId: string,
  role: Role,
  name = `${role} client`,
): Promise<ClientCredentials> {
  return insertClient(db, accountId, role, name, await newCredentials());
}

/** A new account with one admin client in it, written together or not at all. */
export async function createAccount(db: Db, name: string): Promise<ClientCredentials & { accountId: string }> {
  const credentials = await newCredentials();
  return db.transaction().execute(async (trx) => {
    const accountId = randomUUID();
    await trx.insertInto('accounts').values({ id: accountId, name, createdAt: now() }).execute();
    return { accountId, ...(await insertClient(trx, accountId, 'admin', 'admin client', credentials)) };
  });
}

export interface ClientSummary {
  clientId: string;
  name: string;
  role: string;
  createdAt: string;
  revokedAt: string | null;
}

export function listAccounts(db: Executor): Promise<{ accountId: string; name: string; createdAt: string }[]> {
  return db.selectFrom('accounts').select(['id as accountId', 'name', 'createdAt']).orderBy('createdAt').orderBy('id').execute();
}

/** The clients of an account, revoked ones included; never their secret hashes. */
export async function listClients(db: Executor, accountId: string): Promise<ClientSummary[]> {
  const account = await db.selectFrom('accounts').select('id').where('id', '=', accountId).executeTakeFirst();
  if (!account) throw new Error(`account ${accountId} does not exist`);
  return db
    .selectFrom('apiClients')
    .select(['id as clientId', 'name', 'role', 'createdAt', 'revokedAt'])
    .where('accountId', '=', accountId)
    .orderBy('createdAt')
    .orderBy('id')
    .execute();
}

/** Revokes a client (once: a second revocation keeps the first time); its tokens stop working as servers refresh. */
export async function revokeClient(db: Executor, clientId: string): Promise<{ clientId: string; revokedAt: string }> {
  const client = await db.selectFrom('apiClients').select('revokedAt').where('id', '=', clientId).executeTakeFirst();
  if (!client) throw new Error(`client ${clientId} does not exist`);
  if (client.revokedAt) return { clientId, revokedAt: client.revokedAt };
  const revokedAt = now();
  await db.updateTable('apiClients').set({ revokedAt }).where('id', '=', clientId).execute();
  return { clientId, revokedAt };
}
