import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { Executor } from '../db/database.ts';
import { now } from '../db/database.ts';
import { InvalidToken, type Principal } from './tokens.ts';

/**
 * Directory-integration tokens: long-lived bearer tokens that an identity provider keeps in its SCIM
 * settings. A token is `dpcdir_<id>.<secret>`; only a SHA-256 of the 256-bit random secret is stored
 * (a slow hash buys nothing against a secret that cannot be guessed, and would cost every request).
 * Such a token reaches only the operations marked `directoryIntegration` of its own account.
 */
export const DIRECTORY_TOKEN_PREFIX = 'dpcdir_';
const TOKEN_SHAPE = /^dpcdir_([0-9a-f-]{36})\.([A-Za-z0-9_-]{43})$/;

function digest(secret: string): string {
  return createHash('sha256').update(secret).digest('base64url');
}

export function isDirectoryToken(token: string): boolean {
  return token.startsWith(DIRECTORY_TOKEN_PREFIX);
}

export interface DirectoryTokenSummary {
  id: string;
  name: string;
  createdAt: string;
  revokedAt: string | null;
}

/** A new token of the account: its summary and the token itself, which is never available again. */
export async function createDirectoryToken(
  db: Executor,
  accountId: string,
  name: string,
): Promise<DirectoryTokenSummary & { token: string }> {
  const id = randomUUID();
  const secret = randomBytes(32).toString('base64url');
  const createdAt = now();
  await db
    .insertInto('directoryTokens')
    .values({ id, accountId, name, secretHash: digest(secret), createdAt, revokedAt: null })
    .execute();
  return { id, name, createdAt, revokedAt: null, token: `${DIRECTORY_TOKEN_PREFIX}${id}.${secret}` };
}

export function listDirectoryTokens(db: Executor, accountId: string): Promise<DirectoryTokenSummary[]> {
  return db
    .selectFrom('directoryTokens')
    .select(['id', 'name', 'createdAt', 'revokedAt'])
    .where('accountId', '=', accountId)
    .orderBy('createdAt')
    .orderBy('id')
    .execute();
}

/** Revokes a token of the account (a second revocation keeps the first time); undefined when there is no such token. */
export async function revokeDirectoryToken(
  db: Executor,
  accountId: string,
  id: string,
): Promise<DirectoryTokenSummary | undefined> {
  const row = await db
    .selectFrom('directoryTokens')
    .select(['id', 'name', 'createdAt', 'revokedAt'])
    .where('accountId', '=', accountId)
    .where('id', '=', id)
    .executeTakeFirst();
  if (!row || row.revokedAt) return row;
  const revokedAt = now();
  await db.updateTable('directoryTokens').set({ revokedAt }).where('id', '=', id).execute();
  return { ...row, revokedAt };
}

/**
 * The caller a directory token stands for: the account's admin for directory operations only. Looked up
 * on every request, so a revocation takes effect at once on every server.
 */
export async function verifyDirectoryToken(db: Executor, token: string): Promise<Principal> {
  const match = TOKEN_SHAPE.exec(token);
  if (!match) throw new InvalidToken('the directory-integration token is malformed');
  const row = await db
    .selectFrom('directoryTokens')
    .select(['accountId', 'secretHash', 'revokedAt'])
    .where('id', '=', match[1])
    .executeTakeFirst();
  const expected = Buffer.from(row?.secretHash ?? digest(''), 'base64url');
  const actual = Buffer.from(digest(match[2]), 'base64url');
  if (!row || !timingSafeEqual(actual, expected)) throw new InvalidToken('the directory-integration token is not known');
  if (row.revokedAt) throw new InvalidToken('the directory-integration token was revoked');
  return { clientId: `directory-token:${match[1]}`, accountId: row.accountId, role: 'admin', directoryToken: true };
}
