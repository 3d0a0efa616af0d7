import type { PortableMigration } from './types.ts';

/**
 * An agent's client secret, sealed with the server's key (core/secret-box.ts), beside its hash: clients
 * read the credentials of an agent back (GET /v1/agents/{agentId}/credentials) until they are rotated.
 */
export const agentSealedSecrets: PortableMigration = {
  async up(db) {
    await db.schema.alterTable('agents').addColumn('sealed_secret', 'text').execute();
  },
};
