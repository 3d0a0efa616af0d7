import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/**
 * Where an agent keeps the customer's secrets. A backend for another vault (a cloud secret manager,
 * HashiCorp Vault, ...) implements these two operations and is passed to `runAgent`.
 */
export interface VaultBackend {
  /** The kind of vault, as pipelines' resolver references name it. */
  readonly vaultType: string;
  /**
   * Stores `value` under `name` and `key`. When that name and key hold a value already, it is replaced
   * only with `overwrite` (or when the same `writeId` wrote it: a redelivered write); else 'exists'.
   */
  put(entry: { name: string; key: string; value: unknown; writeId: string; overwrite: boolean }): Promise<'written' | 'exists'>;
  get(name: string, key: string): Promise<unknown>;
}

interface VaultFile {
  secrets: Record<string, Record<string, { value: unknown; writeId: string; writtenAt: string }>>;
}

/** The embedded vault: one JSON file in the agent's state folder, readable by the agent's user only, replaced atomically. */
export class LocalFileVault implements VaultBackend {
  readonly vaultType = 'MATILLION_CUSTOMER_VAULT';
  private readonly file: string;

  constructor(stateDir: string) {
    mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    this.file = path.join(stateDir, 'vault.json');
  }

  private read(): VaultFile {
    return existsSync(this.file) ? (JSON.parse(readFileSync(this.file, 'utf8')) as VaultFile) : { secrets: {} };
  }

  async put(entry: { name: string; key: string; value: unknown; writeId: string; overwrite: boolean }) {
    const vault = this.read();
    const held = vault.secrets[entry.name]?.[entry.key];
    if (held && !entry.overwrite && held.writeId !== entry.writeId) return 'exists';
    (vault.secrets[entry.name] ??= {})[entry.key] = {
      value: entry.value,
      writeId: entry.writeId,
      writtenAt: new Date().toISOString(),
    };
    const next = `${this.file}.${process.pid}.tmp`;
    writeFileSync(next, JSON.stringify(vault), { mode: 0o600 });
    renameSync(next, this.file);
    return 'written' as const;
  }

  async get(name: string, key: string) {
    return this.read().secrets[name]?.[key]?.value;
  }
}
