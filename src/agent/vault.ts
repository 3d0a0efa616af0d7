import { mkdir, open, readFile, rename } from 'node:fs/promises';
import path from 'node:path';

/** What a secret holds: a string, or named string members (clientId, clientSecret, ...). */
export type SecretValue = string | Record<string, string>;

/**
 * Where the agent keeps the customer's secrets. The reference agent ships LocalFileVault; another backend
 * (a cloud secret manager, HashiCorp Vault) implements these two methods and is handed to runAgent.
 * A secret is addressed by name and, within it, by key.
 */
export interface VaultBackend {
  /**
   * Stores `value` at `name`/`key`. Throws SecretExists when the key is already set and `overwrite` is
   * false. Answers how the platform refers to it (`resolverRef`) and the name it has in the vault.
   */
  write(
    name: string,
    key: string,
    value: SecretValue,
    options: { overwrite: boolean },
  ): Promise<{ resolverRef: string; vaultSecretName: string }>;
  /** The value at `name`/`key`, or undefined. */
  read(name: string, key: string): Promise<SecretValue | undefined>;
}

export class SecretExists extends Error {
  readonly code = 'secret-exists';
}

/**
 * The vault in memory: secrets by name, their keys by key. Maps, not objects, because names are chosen by
 * users: as object keys, `__proto__` or `constructor` would read and write the prototype, not a secret.
 */
type VaultContents = Map<string, Map<string, SecretValue>>;

/** The file is a JSON object of objects; JSON.parse keeps even a `__proto__` member as an own member. */
function fromFile(text: string): VaultContents {
  const parsed = JSON.parse(text) as unknown;
  const contents: VaultContents = new Map();
  if (typeof parsed !== 'object' || parsed === null) return contents;
  for (const [name, keys] of Object.entries(parsed)) {
    if (typeof keys === 'object' && keys !== null)
      contents.set(name, new Map(Object.entries(keys as Record<string, SecretValue>)));
  }
  return contents;
}

/** Object.fromEntries defines members (a `__proto__` member too) rather than assigning them. */
function toFile(contents: VaultContents): string {
  return JSON.stringify(Object.fromEntries([...contents].map(([name, keys]) => [name, Object.fromEntries(keys)])));
}

/**
 * The embedded default: one JSON file (mode 0600, in a state folder of mode 0700) readable only by the
 * agent's user. Writes go to a temporary file that replaces the old one, so a crash leaves either.
 * Writes are serialised within the process.
 */
export class LocalFileVault implements VaultBackend {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(readonly file: string) {}

  private async load(): Promise<VaultContents> {
    try {
      return fromFile(await readFile(this.file, 'utf8'));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
      throw error;
    }
  }

  private async save(contents: VaultContents): Promise<void> {
    await mkdir(path.dirname(this.file), { recursive: true, mode: 0o700 });
    const temporary = `${this.file}.${process.pid}.tmp`;
    const handle = await open(temporary, 'w', 0o600);
    try {
      await handle.writeFile(toFile(contents));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, this.file);
  }

  write(name: string, key: string, value: SecretValue, options: { overwrite: boolean }) {
    const written = this.queue.then(async () => {
      const contents = await this.load();
      let secret = contents.get(name);
      if (!secret) contents.set(name, (secret = new Map()));
      if (secret.has(key) && !options.overwrite) throw new SecretExists(`secret ${name} already has key ${key}`);
      secret.set(key, value);
      await this.save(contents);
      return { resolverRef: `MATILLION_CUSTOMER_VAULT:${name}:${key}`, vaultSecretName: name };
    });
    this.queue = written.catch(() => undefined);
    return written;
  }

  async read(name: string, key: string): Promise<SecretValue | undefined> {
    return (await this.load()).get(name)?.get(key);
  }
}
