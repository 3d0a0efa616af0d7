/**
 * Where change-event files go. An `s3` target names a bucket and a prefix; the agent's object store setting
 * (`--object-store`, DPC_AGENT_OBJECT_STORE) says what serves it: `file:///folder` keeps each bucket as a
 * folder under that folder; `http(s)://host:port` or `s3://` is an S3 store (s3-store.ts). Every write replaces a whole object, so writing the same key twice is harmless.
 */
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeDurably } from './state.ts';

export interface ObjectStore {
  /** Writes the object whole (durably, for a folder) or not at all. */
  /** Writes the object whole; `contentType` for stores that keep one (JSON lines by default). */
  put(key: string, body: string | Uint8Array, contentType?: string): Promise<void>;
  /** The names of the objects directly under `folder` (a key prefix ending in `/`). */
  list(folder: string): Promise<string[]>;
  remove(key: string): Promise<void>;
  /** What the store is, for messages. */
  describe(): string;
}

/** A bucket as a folder on the agent's disk. Keys are relative paths; none may leave the folder. */
export class FolderStore implements ObjectStore {
  constructor(readonly root: string) {}

  private pathOf(key: string): string {
    const resolved = path.resolve(this.root, key);
    if (resolved !== this.root && !resolved.startsWith(`${this.root}${path.sep}`)) {
      throw new Error(`the object key ${key} leaves the bucket`);
    }
    return resolved;
  }

  put(key: string, body: string | Uint8Array): Promise<void> {
    return writeDurably(this.pathOf(key), body, 0o644);
  }

  async list(folder: string): Promise<string[]> {
    try {
      const entries = await readdir(this.pathOf(folder), { withFileTypes: true });
      return entries.filter((entry) => entry.isFile()).map((entry) => entry.name);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
  }

  async remove(key: string): Promise<void> {
    await rm(this.pathOf(key), { force: true });
  }

  describe(): string {
    return `folder ${this.root}`;
  }
}

/** A bucket name as the S3 rules allow it (so that it is also a safe folder name). */
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/**
 * The store for an `s3` target's bucket, by the agent's object store setting: `file:///folder` (a folder per
 * bucket), `http(s)://host:port` (an S3-compatible service), `s3://` (AWS S3). Undefined when the agent has none.
 */
export async function objectStoreFor(setting: string | undefined, bucket: string): Promise<ObjectStore | undefined> {
  if (!setting) return undefined;
  if (!BUCKET.test(bucket) || bucket.includes('..')) throw new Error(`"${bucket}" is not a valid bucket name`);
  const url = new URL(setting);
  if (url.protocol === 'file:') return new FolderStore(path.join(fileURLToPath(url), bucket));
  if (url.protocol === 'http:' || url.protocol === 'https:' || url.protocol === 's3:') {
    // Loaded here: the S3 client stays out of the start of agents that never write to S3.
    const { S3Store } = await import('./s3-store.ts');
    return new S3Store(bucket, url.protocol === 's3:' ? undefined : url.origin);
  }
  throw new Error(`object store ${url.protocol}// is not supported by this agent (file://, http(s):// and s3:// are)`);
}
