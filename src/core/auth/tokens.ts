import { randomUUID } from 'node:crypto';
import { SignJWT, jwtVerify, decodeProtectedHeader, type JWTPayload } from 'jose';
import type { Db } from '../db/database.ts';
import { isRole, type Role } from './accounts.ts';
import { verifySecret, decoyHash } from './secrets.ts';
import { KeyRing, TOKEN_ALGORITHM } from './keys.ts';
import type { SecretBox } from '../secret-box.ts';

/** An API client of an account: reaches the account's API (/dpc/v1) with its role. */
export interface ClientPrincipal {
  clientId: string;
  accountId: string;
  role: Role;
  /** Set for a directory-integration token, which reaches only operations marked directoryIntegration. */
  directoryToken?: true;
  agentId?: undefined;
}

/** An agent signed in with its credentials: reaches only the agent protocol (/dpc/agent/v1). */
export interface AgentPrincipal {
  clientId: string;
  accountId: string;
  agentId: string;
  role?: undefined;
}

export type Principal = ClientPrincipal | AgentPrincipal;

export interface IssuedToken {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
}

export class InvalidToken extends Error {}

interface TokenSettings {
  issuer: string;
  audience: string;
  tokenTtlSeconds: number;
  revocationRefreshSeconds: number;
}

// Verified tokens are remembered until they expire, so a hot path pays for the signature check once.
const CACHE_LIMIT = 10_000;

export class TokenService {
  readonly keys: KeyRing;
  private readonly verified = new Map<string, { principal: Principal; expiresAt: number }>();
  // Revoked client ids, reloaded from the store every revocationRefreshSeconds: every process stops
  // honouring a revoked client's tokens within that bound, without a store query per request.
  private revoked = new Set<string>();
  private refresher?: NodeJS.Timeout;

  constructor(
    private readonly db: Db,
    private readonly settings: TokenSettings,
    box: SecretBox,
  ) {
    this.keys = new KeyRing(db, settings.tokenTtlSeconds, box);
  }

  /**
   * Client-credentials grant for an account's API client or an agent: undefined when the client is
   * unknown or the secret is wrong. An agent's token carries its agent id instead of a role.
   */
  async issue(clientId: string, clientSecret: string): Promise<IssuedToken | undefined> {
    const client = await this.credentialOf(clientId);
    const valid = await verifySecret(clientSecret, client?.secretHash ?? (await decoyHash));
    if (!client || !valid) return undefined;
    const { kid, key } = await this.keys.signingKey();
    const ttl = this.settings.tokenTtlSeconds;
    const accessToken = await new SignJWT(client.claims)
      .setProtectedHeader({ alg: TOKEN_ALGORITHM, kid, typ: 'JWT' })
      .setSubject(clientId)
      .setIssuer(this.settings.issuer)
      .setAudience(this.settings.audience)
      .setIssuedAt()
      .setNotBefore('0s')
      .setExpirationTime(`${ttl}s`)
      .setJti(randomUUID())
      .sign(key);
    return { access_token: accessToken, token_type: 'Bearer', expires_in: ttl };
  }

  /** The secret hash and token claims of a live API client or of an agent's current credentials. */
  private async credentialOf(clientId: string): Promise<{ secretHash: string; claims: JWTPayload } | undefined> {
    const client = await this.db
      .selectFrom('apiClients')
      .select(['accountId', 'role', 'secretHash'])
      .where('id', '=', clientId)
      .where('revokedAt', 'is', null)
      .executeTakeFirst();
    if (client) return { secretHash: client.secretHash, claims: { account_id: client.accountId, role: client.role } };
    const agent = await this.db
      .selectFrom('agents')
      .select(['id', 'accountId', 'secretHash'])
      .where('clientId', '=', clientId)
      .executeTakeFirst();
    if (!agent?.secretHash) return undefined;
    return { secretHash: agent.secretHash, claims: { account_id: agent.accountId, agent_id: agent.id } };
  }

  /** The caller a bearer token stands for; throws InvalidToken for anything not issued here and alive. */
  async verify(token: string): Promise<Principal> {
    const cached = this.verified.get(token);
    if (cached && this.revoked.has(cached.principal.clientId)) throw new InvalidToken('the client was revoked');
    if (cached) {
      if (cached.expiresAt > Date.now()) return cached.principal;
      this.verified.delete(token);
    }
    let payload: JWTPayload;
    try {
      const { kid } = decodeProtectedHeader(token);
      ({ payload } = await jwtVerify(
        token,
        async () => {
          const key = kid ? await this.keys.verificationKey(kid) : undefined;
          if (!key) throw new InvalidToken('the token was not signed by a key of this server');
          return key;
        },
        {
          algorithms: [TOKEN_ALGORITHM],
          issuer: this.settings.issuer,
          audience: this.settings.audience,
          requiredClaims: ['exp', 'sub'],
        },
      ));
    } catch (error) {
      throw new InvalidToken(error instanceof Error ? error.message : 'invalid token');
    }
    const principal = principalOf(payload);
    if (this.revoked.has(principal.clientId)) throw new InvalidToken('the client was revoked');
    const exp = payload.exp!;
    if (this.verified.size >= CACHE_LIMIT) this.verified.delete(this.verified.keys().next().value!);
    this.verified.set(token, { principal, expiresAt: exp * 1000 });
    return principal;
  }

  /** Reloads the revoked clients from the store. */
  async refreshRevocations(): Promise<void> {
    const rows = await this.db.selectFrom('apiClients').select('id').where('revokedAt', 'is not', null).execute();
    this.revoked = new Set(rows.map((row) => row.id));
  }

  /** Loads the revoked clients now and then every revocationRefreshSeconds; a failed reload keeps the last list. */
  async startRefreshing(onError: (error: unknown) => void): Promise<void> {
    await this.refreshRevocations();
    this.refresher = setInterval(
      () => this.refreshRevocations().catch(onError),
      this.settings.revocationRefreshSeconds * 1000,
    ).unref();
  }

  stopRefreshing(): void {
    clearInterval(this.refresher);
  }
}

function principalOf(payload: JWTPayload): Principal {
  const { sub, account_id: accountId, role, agent_id: agentId, exp } = payload as JWTPayload & Record<string, unknown>;
  if (typeof sub === 'string' && typeof accountId === 'string' && exp) {
    if (typeof agentId === 'string') return { clientId: sub, accountId, agentId };
    if (typeof role === 'string' && isRole(role)) return { clientId: sub, accountId, role };
  }
  throw new InvalidToken('the token lacks the claims of this server');
}
