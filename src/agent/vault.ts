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

type VaultFile = Record<string, Record<string, SecretValue>>;

/**
 * The embedded default: one JSON file (mode 0600, in a state folder of mode 0700) readable only by the
 * agent's user. Writes go to a temporary file that replaces the old one, so a crash leaves either.
 * Writes are serialised within the process.
 */
export class LocalFileVault implements VaultBackend {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(readonly file: string) {}

  private async load(): Promise<VaultFile> {
    try {
      return JSON.parse(await readFile(this.file, 'utf8')) as VaultFile;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return {};
      throw error;
    }
  }

  private async save(contents: VaultFile): Promise<void> {
    await mkdir(path.dirname(this.file), { recursive: true, mode: 0o700 });
    const temporary = `${this.file}.${process.pid}.tmp`;
    const handle = await open(temporary, 'w', 0o600);
    try {
      await handle.writeFile(JSON.stringify(contents));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, this.file);
  }

  write(name: string, key: string, value: SecretValue, options: { overwrite: boolean }) {
    const written = this.queue.then(async () => {
      const contents = await this.load();
      const secret = (contents[name] ??= {});
      if (key in secret && !options.overwrite) throw new SecretExists(`secret ${name} already has key ${key}`);
      secret[key] = value;
      await this.save(contents);
      return { resolverRef: `MATILLION_CUSTOMER_VAULT:${name}:${key}`, vaultSecretName: name };
    });
    this.queue = written.catch(() => undefined);
    return written;
  }

  async read(name: string, key: string): Promise<SecretValue | undefined> {
    return (await this.load())[name]?.[key];
  }
}
