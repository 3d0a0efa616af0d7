import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, importJWK, type JWK, type CryptoKey } from 'jose';
import type { Db } from '../db/database.ts';
import { now } from '../db/database.ts';
import type { SecretBox } from '../secret-box.ts';

export const TOKEN_ALGORITHM = 'ES256';

export interface SigningKey {
  kid: string;
  key: CryptoKey;
}

/** What a private key is sealed to: its row, so that a sealed key copied to another row does not open. */
const sealContext = (kid: string) => `signing-keys:${kid}`;

/** Whether a stored private key is sealed; keys written before sealing are plain JWK JSON. */
const isSealed = (stored: string) => !stored.startsWith('{');

/**
 * The server's token keys, kept in the store so that every process shares them, the private keys sealed
 * by the secret box (whose keys are not in the store). The newest key signs; every key whose tokens may
 * still be alive verifies, so a rotation never cuts a live token short.
 */
export class KeyRing {
  private readonly verifying = new Map<string, CryptoKey>();

  constructor(
    private readonly db: Db,
    private readonly tokenTtlSeconds: number,
    private readonly box: SecretBox,
  ) {}

  /** The newest key, made on first use. */
  async signingKey(): Promise<SigningKey> {
    const row = await this.db
      .selectFrom('signingKeys')
      .select(['kid', 'privateJwk'])
      .where('retiredAt', 'is', null)
      .orderBy('createdAt', 'desc')
      .executeTakeFirst();
    if (!row) return this.rotate();
    // A key stored before keys were sealed is sealed now, on its first use.
    if (!isSealed(row.privateJwk)) await this.reseal();
    const privateJwk = isSealed(row.privateJwk) ? this.box.open(row.privateJwk, sealContext(row.kid)) : row.privateJwk;
    return { kid: row.kid, key: (await importJWK(JSON.parse(privateJwk), TOKEN_ALGORITHM)) as CryptoKey };
  }

  /**
   * Seals again, with the secret box's current key, every private key stored in plain text or sealed with
   * an older key (after DPC_ENCRYPTION_KEYS gained a new first key). Answers how many were resealed.
   */
  async reseal(): Promise<number> {
    const rows = await this.db.selectFrom('signingKeys').select(['kid', 'privateJwk']).execute();
    let resealed = 0;
    for (const { kid, privateJwk } of rows) {
      if (isSealed(privateJwk) && !this.box.isStale(privateJwk)) continue;
      const plain = isSealed(privateJwk) ? this.box.open(privateJwk, sealContext(kid)) : privateJwk;
      await this.db
        .updateTable('signingKeys')
        .set({ privateJwk: this.box.seal(plain, sealContext(kid)) })
        .where('kid', '=', kid)
        .where('privateJwk', '=', privateJwk)
        .execute();
      resealed += 1;
    }
    return resealed;
  }

  /** A new signing key; the old ones are retired and dropped once no token they signed can be alive. */
  async rotate(): Promise<SigningKey> {
    const { privateKey, publicKey } = await generateKeyPair(TOKEN_ALGORITHM, { extractable: true });
    const kid = randomUUID();
    const publicJwk: JWK = { ...(await exportJWK(publicKey)), kid, alg: TOKEN_ALGORITHM, use: 'sig' };
    const privateJwk = await exportJWK(privateKey);
    const createdAt = now();
    const expiredBefore = new Date(Date.now() - this.tokenTtlSeconds * 1000 - 60_000).toISOString();
    await this.db.transaction().execute(async (trx) => {
      await trx.updateTable('signingKeys').set({ retiredAt: createdAt }).where('retiredAt', 'is', null).execute();
      await trx.deleteFrom('signingKeys').where('retiredAt', '<', expiredBefore).execute();
      await trx
        .insertInto('signingKeys')
        .values({
          kid,
          privateJwk: this.box.seal(JSON.stringify(privateJwk), sealContext(kid)),
          publicJwk: JSON.stringify(publicJwk),
          createdAt,
          retiredAt: null,
        })
        .execute();
    });
    return { kid, key: privateKey };
  }

  /** The public key of `kid`, or undefined for a key this deployment does not hold. */
  async verificationKey(kid: string): Promise<CryptoKey | undefined> {
    const cached = this.verifying.get(kid);
    if (cached) return cached;
    const row = await this.db.selectFrom('signingKeys').select('publicJwk').where('kid', '=', kid).executeTakeFirst();
    if (!row) return undefined;
    const key = (await importJWK(JSON.parse(row.publicJwk), TOKEN_ALGORITHM)) as CryptoKey;
    this.verifying.set(kid, key);
    return key;
  }

  /** The JSON Web Key Set that verifies every token this deployment may still accept. */
  async publicJwks(): Promise<{ keys: JWK[] }> {
    const rows = await this.db.selectFrom('signingKeys').select('publicJwk').orderBy('createdAt', 'desc').execute();
    return { keys: rows.map((r) => JSON.parse(r.publicJwk) as JWK) };
  }
}
