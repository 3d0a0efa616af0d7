import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const ALGORITHM = 'aes-256-gcm';
const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const FORMAT = 'v1';
/** Where the key is made and kept when the configuration gives none. */
export const KEY_FILE_NAME = 'encryption.key';

/** A key of the box and the short id that names it inside each sealed value, so the right one opens it. */
interface BoxKey {
  id: string;
  key: Buffer;
}

function boxKey(key: Buffer): BoxKey {
  if (key.length !== KEY_BYTES) throw new Error(`an encryption key must be ${KEY_BYTES} bytes (base64 or base64url)`);
  return { id: createHash('sha256').update(key).digest('hex').slice(0, 8), key };
}

/** The 32-byte key of `text` (base64 or base64url), or an error that says what is wrong. */
export function parseEncryptionKey(text: string): Buffer {
  const key = Buffer.from(text.trim(), 'base64');
  if (key.length !== KEY_BYTES) throw new Error(`an encryption key must be ${KEY_BYTES} bytes in base64, got ${key.length}`);
  return key;
}

/** A new random key, as the configuration takes it. */
export function newEncryptionKey(): string {
  return randomBytes(KEY_BYTES).toString('base64');
}

/**
 * Encryption of secrets at rest (AES-256-GCM), with keys that never enter the store. The first key
 * seals; every key opens what it sealed, so a key can be rotated by putting a new one first and
 * resealing. `context` names what a value belongs to (a table and row) and is authenticated with it,
 * so a sealed value copied to another row does not open there.
 */
export class SecretBox {
  private readonly keys: BoxKey[];

  constructor(keys: Buffer[]) {
    if (keys.length === 0) throw new Error('a secret box needs at least one key');
    this.keys = keys.map(boxKey);
  }

  /**
   * The box of the configuration: the keys of DPC_ENCRYPTION_KEYS when given, else the key file in the
   * data folder, made (readable by this user only) on first use.
   */
  static fromConfig(config: { encryptionKeys: Buffer[]; dataDir: string }): SecretBox {
    if (config.encryptionKeys.length > 0) return new SecretBox(config.encryptionKeys);
    const file = path.join(config.dataDir, KEY_FILE_NAME);
    fs.mkdirSync(config.dataDir, { recursive: true });
    try {
      fs.writeFileSync(file, newEncryptionKey() + '\n', { flag: 'wx', mode: 0o600 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    return new SecretBox([parseEncryptionKey(fs.readFileSync(file, 'utf8'))]);
  }

  /** Id of the key that seals. */
  get currentKeyId(): string {
    return this.keys[0].id;
  }

  seal(plaintext: string, context: string): string {
    const { id, key } = this.keys[0];
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv(ALGORITHM, key, iv).setAAD(Buffer.from(context, 'utf8'));
    const sealed = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final(), cipher.getAuthTag()]);
    return [FORMAT, id, iv.toString('base64url'), sealed.toString('base64url')].join('.');
  }

  open(value: string, context: string): string {
    const [format, id, iv, sealed] = value.split('.');
    if (format !== FORMAT || !sealed) throw new Error('not a sealed value');
    const entry = this.keys.find((k) => k.id === id);
    if (!entry) throw new Error(`sealed with key ${id}, which is not configured (DPC_ENCRYPTION_KEYS)`);
    const bytes = Buffer.from(sealed, 'base64url');
    const decipher = createDecipheriv(ALGORITHM, entry.key, Buffer.from(iv, 'base64url'))
      .setAAD(Buffer.from(context, 'utf8'))
      .setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
    return Buffer.concat([decipher.update(bytes.subarray(0, bytes.length - TAG_BYTES)), decipher.final()]).toString('utf8');
  }

  /**
   * A key for `purpose`, derived from the current key (HMAC-SHA256): the same on every server instance
   * configured alike, and telling nothing of the key it comes from. Rotating the current key changes it.
   */
  derive(purpose: string): Buffer {
    return createHmac('sha256', this.keys[0].key).update(`dpc derived key: ${purpose}`).digest();
  }

  /** Whether `value` was sealed with a key other than the current one (and so is due for resealing). */
  isStale(value: string): boolean {
    return value.split('.')[1] !== this.currentKeyId;
  }
}
