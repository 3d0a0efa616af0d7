/**
 * Where change-event files go. An `s3` target names a bucket and a prefix; the agent's object store setting
 * (`--object-store`, DPC_AGENT_OBJECT_STORE) says what serves it: `file:///folder` keeps each bucket as a
 * folder under that folder. Every write replaces a whole object, so writing the same key twice is harmless.
 */
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeDurably } from './state.ts';

export interface ObjectStore {
  /** Writes the object whole (durably, for a folder) or not at all. */
  put(key: string, body: string): Promise<void>;
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

  put(key: string, body: string): Promise<void> {
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

/** The store for an `s3` target's bucket, by the agent's object store setting; undefined when the agent has none. */
export function objectStoreFor(setting: string | undefined, bucket: string): ObjectStore | undefined {
  if (!setting) return undefined;
  if (!BUCKET.test(bucket) || bucket.includes('..')) throw new Error(`"${bucket}" is not a valid bucket name`);
  const url = new URL(setting);
  if (url.protocol === 'file:') return new FolderStore(path.join(fileURLToPath(url), bucket));
  throw new Error(`object store ${url.protocol}// is not supported by this agent (file:// is)`);
}
