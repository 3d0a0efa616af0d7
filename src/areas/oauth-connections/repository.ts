import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import type { OAuthConnectionTable } from './tables.ts';
import type { CreateOAuthConnectionRequest, OAuthConnection, SecretReference } from './schemas.ts';
import { credentialViolations, refuseCredentials } from '../../core/credentials.ts';

function toOAuthConnection(row: Selectable<OAuthConnectionTable>): OAuthConnection {
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
    await db
      .insertInto('oauthConnections')
      .values({
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
      })
      .execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`An OAuth connection named "${request.name}" already exists in this account.`);
    throw error;
  }
  return requireOAuthConnection(db, accountId, id);
}

/** The account's OAuth connections, oldest first. */
export async function listOAuthConnections(db: Executor, accountId: string): Promise<OAuthConnection[]> {
  const rows = await db.selectFrom('oauthConnections').selectAll().where('accountId', '=', accountId).orderBy('seq').execute();
  return rows.map(toOAuthConnection);
}

/** OAuth connection `id` of the account, or a 404 (another account's answers as if it did not exist). */
export async function requireOAuthConnection(db: Executor, accountId: string, id: string): Promise<OAuthConnection> {
  const row = await db
    .selectFrom('oauthConnections')
    .selectAll()
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (!row) throw notFound(`OAuth connection ${id} does not exist.`);
  return toOAuthConnection(row);
}

/** Those of `ids` that are OAuth connections of the account. */
export async function existingOAuthConnectionIds(db: Executor, accountId: string, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db
    .selectFrom('oauthConnections')
    .select('id')
    .where('accountId', '=', accountId)
    .where('id', 'in', ids)
    .execute();
  return new Set(rows.map((row) => row.id));
}

/** Records where the tokens of a completed setup are kept: the connection is authorized from then on. */
export async function setUpOAuthConnection(
  db: Executor,
  accountId: string,
  id: string,
  tokens: SecretReference,
): Promise<OAuthConnection> {
  const result = await db
    .updateTable('oauthConnections')
    .set({ tokens: JSON.stringify(tokens) })
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (result.numUpdatedRows === 0n) throw notFound(`OAuth connection ${id} does not exist.`);
  return requireOAuthConnection(db, accountId, id);
}

export async function deleteOAuthConnection(db: Executor, accountId: string, id: string): Promise<void> {
  const result = await db
    .deleteFrom('oauthConnections')
    .where('id', '=', id)
    .where('accountId', '=', accountId)
    .executeTakeFirst();
  if (result.numDeletedRows === 0n) throw notFound(`OAuth connection ${id} does not exist.`);
}
