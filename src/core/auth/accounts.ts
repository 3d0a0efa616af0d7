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

export async function createClient(
  db: Executor,
  accountId: string,
  role: Role,
  name = `${role} client`,
): Promise<ClientCredentials> {
  const account = await db.selectFrom('accounts').select('id').where('id', '=', accountId).executeTakeFirst();
  if (!account) throw new Error(`account ${accountId} does not exist`);
  const clientId = randomUUID();
  const clientSecret = newClientSecret();
  await db
    .insertInto('apiClients')
    .values({ id: clientId, accountId, name, role, secretHash: await hashSecret(clientSecret), createdAt: now() })
    .execute();
  return { clientId, clientSecret };
}

/** A new account with one admin client in it, written together or not at all. */
export function createAccount(db: Db, name: string): Promise<ClientCredentials & { accountId: string }> {
  return db.transaction().execute(async (trx) => {
    const accountId = randomUUID();
    await trx.insertInto('accounts').values({ id: accountId, name, createdAt: now() }).execute();
    return { accountId, ...(await createClient(trx, accountId, 'admin', 'admin client')) };
  });
}
