import type { Generated } from 'kysely';

export interface OAuthConnectionTable {
  /** Creation order: the list answers oldest first, even within one millisecond. */
  seq: Generated<number>;
  id: string;
  accountId: string;
  name: string;
  grantType: string;
  clientId: string;
  /** JSON SecretReference. */
  clientSecret: string;
  authorizationUrl: string | null;
  tokenUrl: string;
  /** JSON array of strings. */
  scopes: string;
  /** JSON SecretReference of the tokens; null while the connection is pending setup. */
  tokens: string | null;
  createdAt: string;
  /** Moved on by every UPDATE of the row: a write with If-Match compares it (core/conditional.ts). */
  rowVersion: Generated<number>;
}

export interface OAuthConnectionTables {
  oauthConnections: OAuthConnectionTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends OAuthConnectionTables {}
}
