import { randomUUID } from 'node:crypto';
import { SignJWT, jwtVerify, decodeProtectedHeader, type JWTPayload, decodeJwt } from 'jose';
import type { Db } from '../db/database.ts';
import { isRole, type Role } from './accounts.ts';
import { verifySecret, decoyHash } from './secrets.ts';
import { KeyRing, TOKEN_ALGORITHM } from './keys.ts';
import type { SecretBox } from '../secret-box.ts';

export interface Principal {
  clientId: string;
  accountId: string;
  role: Role;
  /** Set for a directory-integration token, which reaches only operations marked directoryIntegration. */
  directoryToken?: true;
}

/** The caller an agent token stands for: an agent of an account (its client id is checked by the agent routes). */
export interface AgentPrincipal {
  clientId: string;
  accountId: string;
  agentId: string;
}

/** Claim that marks an agent's token: it reaches only the agent protocol (/dpc/agent/v1), never the account API. */
const AGENT_TOKEN_USE = 'agent';

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

/** Keeps `value` for `token` in `cache`, forgetting the oldest past CACHE_LIMIT. */
function remember<T>(cache: Map<string, T>, token: string, value: T): void {
  if (cache.size >= CACHE_LIMIT) cache.delete(cache.keys().next().value!);
  cache.set(token, value);
}

export class TokenService {
  readonly keys: KeyRing;
  private readonly verified = new Map<string, { principal: Principal; expiresAt: number }>();
  /** Agent tokens whose signature and claims were verified, until they expire (at most CACHE_LIMIT). */
  private readonly verifiedAgents = new Map<string, { principal: AgentPrincipal; expiresAt: number }>();
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
   * Client-credentials grant, for an API client of an account or for an agent (whose credentials live on
   * its own row): undefined when the client is unknown or the secret is wrong.
   */
  async issue(clientId: string, clientSecret: string): Promise<IssuedToken | undefined> {
    const client = await this.db
      .selectFrom('apiClients')
      .select(['id', 'accountId', 'role', 'secretHash'])
      .where('id', '=', clientId)
      .where('revokedAt', 'is', null)
      .executeTakeFirst();
    const agent = client
      ? undefined
      : await this.db
          .selectFrom('agents')
          .select(['id', 'accountId', 'secretHash'])
          .where('clientId', '=', clientId)
          .executeTakeFirst();
    const valid = await verifySecret(clientSecret, client?.secretHash ?? agent?.secretHash ?? (await decoyHash));
    if (!valid || !(client || agent)) return undefined;
    const claims = client
      ? { account_id: client.accountId, role: client.role }
      : { account_id: agent!.accountId, agent_id: agent!.id, token_use: AGENT_TOKEN_USE };
    const { kid, key } = await this.keys.signingKey();
    const ttl = this.settings.tokenTtlSeconds;
    const accessToken = await new SignJWT(claims)
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

  /**
   * The caller of a token verified before and still alive, without waiting: undefined when the token
   * must be verified (verify); throws InvalidToken when its client was revoked since.
   */
  known(token: string): Principal | undefined {
    const cached = this.verified.get(token);
    if (!cached) return undefined;
    if (this.revoked.has(cached.principal.clientId)) throw new InvalidToken('the client was revoked');
    if (cached.expiresAt > Date.now()) return cached.principal;
    this.verified.delete(token);
    return undefined;
  }

  /** When a token this request was let in with expires (ms since the epoch): its `exp` claim. */
  expiryOf(token: string): number {
    const cached = this.verified.get(token)?.expiresAt;
    if (cached !== undefined) return cached;
    const { exp } = decodeJwt(token);
    return typeof exp === 'number' ? exp * 1000 : 0;
  }

  /**
   * Whether what a client was let in with still stands: its client not revoked (as far as this process has
   * heard: revocationRefreshSeconds) and its token, expiring at `expiresAt`, alive. For what stays open
   * past the request that was let in: an event stream.
   */
  stillValid(clientId: string, expiresAt: number): boolean {
    return !this.revoked.has(clientId) && expiresAt > Date.now();
  }

  /** The caller a bearer token stands for; throws InvalidToken for anything not issued here and alive. */
  async verify(token: string): Promise<Principal> {
    const known = this.known(token);
    if (known) return known;
    const payload = await this.verifySignature(token);
    if (payload.token_use === AGENT_TOKEN_USE) {
      throw new InvalidToken('an agent token reaches only the agent operations under /dpc/agent/v1');
    }
    const { sub, account_id: accountId, role, exp } = payload as JWTPayload & { account_id?: unknown; role?: unknown };
    if (typeof sub !== 'string' || typeof accountId !== 'string' || typeof role !== 'string' || !isRole(role) || !exp) {
      throw new InvalidToken('the token lacks the claims of this server');
    }
    if (this.revoked.has(sub)) throw new InvalidToken('the client was revoked');
    const principal: Principal = { clientId: sub, accountId, role };
    remember(this.verified, token, { principal, expiresAt: exp * 1000 });
    return principal;
  }

  /**
   * The agent an agent token stands for; throws InvalidToken for any other token (an account's included). A
   * token verified before is not verified again while it is alive (an ES256 verification is most of an agent
   * request's CPU): whether its credentials are still the agent's current ones is the caller's check, made
   * every time (agents area, authenticateAgent).
   */
  async verifyAgent(token: string): Promise<AgentPrincipal> {
    const cached = this.verifiedAgents.get(token);
    if (cached && cached.expiresAt > Date.now()) return cached.principal;
    if (cached) this.verifiedAgents.delete(token);
    const payload = await this.verifySignature(token);
    const { sub, account_id: accountId, agent_id: agentId, exp } = payload;
    if (
      payload.token_use !== AGENT_TOKEN_USE ||
      typeof sub !== 'string' ||
      typeof accountId !== 'string' ||
      typeof agentId !== 'string'
    ) {
      throw new InvalidToken('the agent operations take only an agent token (from the credentials of an agent)');
    }
    const principal: AgentPrincipal = { clientId: sub, accountId, agentId };
    remember(this.verifiedAgents, token, { principal, expiresAt: exp! * 1000 });
    return principal;
  }

  /** The claims of a token signed by a key of this server, for this audience, and alive. */
  private async verifySignature(token: string): Promise<JWTPayload & Record<string, unknown>> {
    try {
      const { kid } = decodeProtectedHeader(token);
      const { payload } = await jwtVerify(
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
      );
      return payload;
    } catch (error) {
      throw new InvalidToken(error instanceof Error ? error.message : 'invalid token');
    }
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
