/**
 * The OAuth connections' rules: URLs that carry no credential, unique names in the account, secrets kept as
 * references only, the status a connection's tokens give it, and another account's connection answering
 * as if it did not exist. The SQL is the repository's.
 */
import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { badRequest, conflict, notFound } from '../../core/problems.ts';
import type { CreateOAuthConnectionRequest, OAuthConnection, SecretReference } from './schemas.ts';
import { credentialViolations, refuseCredentials } from '../../core/credentials.ts';
import {
  deleteOAuthConnectionRow,
  findOAuthConnection,
  insertOAuthConnection,
  oauthConnectionRows,
  updateTokens,
  type OAuthConnectionRow,
} from './repository.ts';

const missing = (id: string) => notFound(`OAuth connection ${id} does not exist.`);

function toOAuthConnection(row: OAuthConnectionRow): OAuthConnection {
  return {
    id: row.id,
    name: row.name,
    grantType: row.grantType,
    clientId: row.clientId,
    clientSecret: JSON.parse(row.clientSecret),
    ...(row.authorizationUrl !== null && { authorizationUrl: row.authorizationUrl }),
    tokenUrl: row.tokenUrl,
    scopes: JSON.parse(row.scopes),
    ...(row.tokens !== null && { tokens: JSON.parse(row.tokens) }),
    status: row.tokens === null ? 'PENDING_SETUP' : 'AUTHORIZED',
    createdAt: row.createdAt,
  };
}

export async function createOAuthConnection(
  db: Executor,
  accountId: string,
  request: CreateOAuthConnectionRequest,
): Promise<OAuthConnection> {
  refuseCredentials(
    credentialViolations(
      { authorizationUrl: request.authorizationUrl, tokenUrl: request.tokenUrl },
      'body',
      'the client secret and tokens go in secret references',
    ),
    'An OAuth connection URL carries a credential.',
  );
  const id = randomUUID();
  try {
    await insertOAuthConnection(db, {
      id,
      accountId,
      name: request.name,
      grantType: request.grantType,
      clientId: request.clientId,
      clientSecret: JSON.stringify(request.clientSecret),
      authorizationUrl: request.authorizationUrl ?? null,
      tokenUrl: request.tokenUrl,
      scopes: JSON.stringify(request.scopes ?? []),
      tokens: request.tokens ? JSON.stringify(request.tokens) : null,
      createdAt: now(),
    });
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`An OAuth connection named "${request.name}" already exists in this account.`);
    throw error;
  }
  return requireOAuthConnection(db, accountId, id);
}

/** The account's OAuth connections, oldest first. */
export async function listOAuthConnections(db: Executor, accountId: string): Promise<OAuthConnection[]> {
  return (await oauthConnectionRows(db, accountId)).map(toOAuthConnection);
}

/** OAuth connection `id` of the account, or a 404 (another account's answers as if it did not exist). */
export async function requireOAuthConnection(db: Executor, accountId: string, id: string): Promise<OAuthConnection> {
  const row = await findOAuthConnection(db, accountId, id);
  if (!row) throw missing(id);
  return toOAuthConnection(row);
}

/** Records where the tokens of a completed setup are kept: the connection is authorized from then on. */
export async function setUpOAuthConnection(
  db: Executor,
  accountId: string,
  id: string,
  tokens: SecretReference,
): Promise<OAuthConnection> {
  if (!(await updateTokens(db, accountId, id, JSON.stringify(tokens)))) throw missing(id);
  return requireOAuthConnection(db, accountId, id);
}

export async function deleteOAuthConnection(db: Executor, accountId: string, id: string): Promise<void> {
  if (!(await deleteOAuthConnectionRow(db, accountId, id))) throw missing(id);
}

/** A connection is deleted only when the caller confirms it (`confirm=true`); else a 400 saying how, for the request at `path`. */
export function requireDeletionConfirmed(confirm: boolean | undefined, path: string): void {
  if (confirm !== true) {
    throw badRequest(`Deleting an OAuth connection needs confirmation: repeat the request as DELETE ${path}?confirm=true.`, [
      'confirm: must be true to delete an OAuth connection',
    ]);
  }
}
