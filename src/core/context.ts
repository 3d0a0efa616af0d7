/**
 * What the shared plumbing hangs on Fastify: the configuration, the store, the token service, the
 * job queue and the secret box on the instance, and the authenticated caller on each request.
 */
import type { Config } from './config.ts';
import type { Store } from './db/database.ts';
import type { Role } from './auth/accounts.ts';
import type { AgentPrincipal, Principal, TokenService } from './auth/tokens.ts';
import type { JobQueue } from './jobs.ts';
import type { OutboxWakeups } from './outbox-wakeups.ts';
import type { SecretBox } from './secret-box.ts';
import type { Metrics } from './metrics.ts';
import type { ErrorSender } from './errors-plugin.ts';
import type { VersionedRow } from './conditional.ts';
import type { FastifyReply } from 'fastify';

declare module 'fastify' {
  interface FastifyInstance {
    config: Config;
    store: Store;
    tokens: TokenService;
    jobs: JobQueue;
    /** Wake-ups for readers of the outbox: an account may have new events. */
    outboxWakeups: OutboxWakeups;
    /** Encrypts secrets kept in the store with keys kept outside it. */
    secretBox: SecretBox;
    metrics: Metrics;
    /** Set at the start of a graceful shutdown: /readyz answers 503 from then on. */
    shuttingDown: boolean;
    /**
     * Answers a request no route takes: 405 (with Allow) where the path has other methods, else 404; `send`
     * renders it (problem+json unless an area, as SCIM does, answers in its own error form).
     */
    answerNoRoute(request: FastifyRequest, reply: FastifyReply, send?: ErrorSender): FastifyReply;
  }
  interface FastifyRequest {
    /** Set by the auth hook on every /dpc/v1 operation. */
    principal: Principal;
    /** Set by the agent auth hook on every /dpc/agent/v1 operation. */
    agent: AgentPrincipal;
    /** Ids of what a write touched beyond its path parameters, for the audit trail. */
    auditIds: Record<string, string>;
  }
  interface FastifyContextConfig {
    /** Least role an operation needs; reads default to viewer and writes to developer. */
    role?: Role;
    /** A SCIM operation: directory-integration tokens reach these and nothing else. */
    directoryIntegration?: boolean;
    /** Changes nothing although sent as POST (SCIM's .search): no audit event. */
    readOnly?: boolean;
    /** A read that hands out a secret (an agent's credentials): it leaves an audit event like a write. */
    audited?: boolean;
    /**
     * The one row a PUT, PATCH or DELETE changes, whose version a write with If-Match compares in the write
     * itself (core/conditional.ts); the table has a `row_version` column that every UPDATE of the row moves on.
     */
    rowVersion?: VersionedRow;
  }
}

export {};
