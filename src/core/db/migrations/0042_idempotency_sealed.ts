import type { PortableMigration } from './types.ts';

/**
 * Idempotency keys' answers are sealed and their fingerprints keyed (core/idempotency.ts, attack 3 A12).
 * Rows written before kept answers in plain text (some showing a secret once) and an unkeyed SHA-256 of the
 * request: they are deleted, so that a retry with such a key runs as a new request (as after the 24 hours).
 */
export const idempotencySealed: PortableMigration = {
  async up(db) {
    await db.deleteFrom('idempotency_keys' as never).execute();
  },
};
