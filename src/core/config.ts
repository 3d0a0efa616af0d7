import { isIP } from 'node:net';
import path from 'node:path';
import { parseEncryptionKey } from './secret-box.ts';

/** A setting that is not valid; its message is one line naming the variable. */
export class ConfigError extends Error {}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Everything the server and the CLI read from the environment, parsed once. */
export interface Config {
  host: string;
  port: number;
  /** Folder of the embedded SQLite store; unused when databaseUrl is set. */
  dataDir: string;
  /** postgres://... selects PostgreSQL instead of the embedded store. */
  databaseUrl?: string;
  issuer: string;
  audience: string;
  tokenTtlSeconds: number;
  /** How often each process reloads revoked clients: the bound on a revoked client's tokens still working. */
  revocationRefreshSeconds: number;
  /** Largest JSON body accepted, in bytes (413 past it). */
  bodyLimit: number;
  /** Artifact uploads (multipart): most parts, largest part and largest total of part contents, in bytes (413 past them). */
  uploadMaxParts: number;
  uploadMaxPartBytes: number;
  uploadMaxBytes: number;
  /** Uploads read at once by this process; more wait (their bodies unread) up to uploadQueueTimeoutMs, then 503. */
  uploadConcurrency: number;
  uploadQueueTimeoutMs: number;
  /** Where uploads are staged while they are read; `staging` in the data folder when not given. */
  stagingDir?: string;
  /** Where hosted Git repositories live; `repositories` in the data folder when not given. Shared by every instance. */
  repositoriesDir?: string;
  /** How long a running background job stays with its process before another takes it over (the process died). */
  jobLeaseMs: number;
  /** GitLab API base URL for token rotation; the target clone URL's origin when not given. */
  gitlabApiUrl?: string;
  /** Git runs that reach other hosts (migrations): the longest one command may run, and the HTTP low-speed limit. */
  gitTimeoutMs: number;
  gitLowSpeedLimit: number;
  gitLowSpeedSeconds: number;
  /** Largest pack a push to a hosted repository may send (git's receive.maxInputSize), in bytes. */
  gitMaxPushBytes: number;
  /** Requests per client per window; 0 turns rate limiting off. */
  rateLimitMax: number;
  rateLimitWindowMs: number;
  problemTypeBase: string;
  logLevel: string;
  /** Whether this process runs background jobs. */
  runJobs: boolean;
  /** Whether the server processes run a platform-hosted agent per account (for environments without a default agent). */
  hostedAgent: boolean;
  /** PostgreSQL deployments: the hosted agents' warehouse (a schema per account and environment); else each uses DuckDB. */
  hostedWarehouseUrl?: string;
  /** Whether SQLite reads are remembered until the store changes (rememberedRead); off: every read asks the store. */
  rememberReads: boolean;
  /** Address ranges (CIDR) outbound requests may reach although they are loopback, private or reserved. */
  outboundAllowedRanges: string[];
  /** Whole-request deadline of an outbound request, redirects included. */
  outboundTimeoutMs: number;
  /** Bytes of an outbound response body kept; the rest is cut off. */
  outboundMaxResponseBytes: number;
  outboundMaxRedirects: number;
  /** PEM file of certificate authorities trusted for outbound HTTPS besides the usual ones. */
  outboundCaFile?: string;
  /** Keys that encrypt secrets at rest, the first sealing; empty: a key file in the data folder. */
  encryptionKeys: Buffer[];
  /** Whether /metrics is served, and the bearer token it then requires (none: open). */
  metrics: boolean;
  /** Time between /readyz turning 503 and the server closing, on a graceful shutdown. */
  shutdownDrainMs: number;
  /** Longest wait for requests in flight on a graceful shutdown; then their connections are closed. */
  shutdownTimeoutMs: number;
  metricsToken?: string;
  /** A run whose agent has been out of contact this long becomes UNKNOWN (a later report resolves it). */
  executionLostAfterMs: number;
  /** How often each process looks for lost runs and due schedules. */
  schedulerIntervalMs: number;
  /** A schedule's due time seen later than this (the server was down) is skipped rather than run late. */
  scheduleCatchUpMs: number;
  /** An agent is `connected` while its last heartbeat or poll is at most this old. */
  agentConnectedWindowSeconds: number;
  /** How long delivered agent work stays with its agent without a heartbeat naming it, before it is delivered again. */
  agentWorkLeaseSeconds: number;
  /** Longest wait of an agent's long poll for work. */
  agentPollMaxWaitSeconds: number;
  /** How long a secret write (E15) waits for the agent's confirmation before answering 504. */
  secretWriteTimeoutSeconds: number;
  /** The language model of AI agent tasks, reached through the OpenAI-compatible chat completions API. */
  aiModel: AiModelConfig;
  /** How long outbox events are kept (the event feed and webhooks resume within it). */
  eventsRetentionDays: number;
  /** How often followers of the outbox look for events without being woken (on SQLite, the wake-up across processes). */
  eventsPollMs: number;
  /** Time between keep-alive comments on an idle event stream. */
  eventsHeartbeatSeconds: number;
  /** Event streams one API client may hold open on one process; more are 429. */
  eventsStreamsPerClient: number;
  /** Waits before each retry of a failed webhook delivery, in seconds: one try, then one per entry. */
  webhookRetrySeconds: number[];
  /** A webhook is disabled when this many deliveries in a row failed every try. */
  webhookDisableAfter: number;
  /** Webhook deliveries sent at once per process (one at a time per webhook). */
  webhookConcurrency: number;
  /** An OpenLineage HTTP endpoint (Marquez's `/api/v1/lineage`, a catalogue's) every stored lineage event is POSTed to; none by default. */
  openLineageUrl?: URL;
  /** Tries of each push to openLineageUrl (with the job queue's backoff, 1 s doubling to 60 s) before it is given up. */
  openLineageAttempts: number;
  /** Whether lineage is recorded (DPC_LINEAGE): off, no batch run, step or streaming lineage is written, and none is pushed. */
  lineage: boolean;
  /** Credits per run-hour by agent type (consumption); `default` prices other types and deleted agents. */
  creditsPerHour: Readonly<Record<string, number>>;
}

/** Credits per run-hour when DPC_CREDITS_PER_HOUR does not say otherwise: the platform's own agents cost double. */
export const DEFAULT_CREDITS_PER_HOUR: Readonly<Record<string, number>> = Object.freeze({
  default: 1,
  CUSTOMER_HOSTED: 1,
  PLATFORM_HOSTED: 2,
  streaming: 1,
});

/** "TYPE=rate,TYPE=rate" over the defaults; a rate is a non-negative number. Kept in an object without a prototype. */
function creditRates(env: NodeJS.ProcessEnv, name: string): Readonly<Record<string, number>> {
  const rates: Record<string, number> = Object.assign(Object.create(null), DEFAULT_CREDITS_PER_HOUR);
  for (const entry of (env[name] ?? '')
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const match = /^([A-Za-z][\w-]{0,63})=(\d+(\.\d+)?)$/.exec(entry);
    if (!match) throw new ConfigError(`${name} must be comma-separated TYPE=rate pairs (e.g. PLATFORM_HOSTED=2), got "${entry}"`);
    // Agent types are a closed list: a misspelt one would leave the real type at its default rate unnoticed.
    if (!Object.hasOwn(DEFAULT_CREDITS_PER_HOUR, match[1])) {
      throw new ConfigError(
        `${name} names "${match[1]}", which is no agent type: use ${Object.keys(DEFAULT_CREDITS_PER_HOUR).join(', ')}`,
      );
    }
    rates[match[1]] = Number(match[2]);
  }
  return Object.freeze(rates);
}

export interface AiModelConfig {
  /** Model name; without one, AI agent tasks end ERRORED saying no model is configured. */
  name?: string;
  /** Base URL of the chat completions API (https://api.openai.com/v1 when not given). */
  baseUrl?: string;
  /** Sent as the bearer token; local servers usually need none. Never logged or stored. */
  apiKey?: string;
  /** Longest wait for one answer of the model. */
  timeoutMs: number;
  /** Per task: model calls, tool calls asked for, and working time (model calls and tools) in seconds. */
  maxTurns: number;
  maxToolCalls: number;
  maxTaskSeconds: number;
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, least = 0, most = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || value < least || value > most) {
    throw new ConfigError(
      `${name} must be an integer from ${least}${most < Number.MAX_SAFE_INTEGER ? ` to ${most}` : ''}, got "${raw}"`,
    );
  }
  return value;
}

/** An http(s) URL without credentials in it (a user or password), or undefined when the setting is empty. */
function httpUrl(env: NodeJS.ProcessEnv, name: string): URL | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const url = URL.canParse(raw.trim()) ? new URL(raw.trim()) : undefined;
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.username || url.password) {
    throw new ConfigError(`${name} must be an http or https URL without a user or password, got "${raw}"`);
  }
  return url;
}

/** "10.0.0.0/8,127.0.0.1" into CIDR ranges; a bare address is a range of one. */
function addressRanges(env: NodeJS.ProcessEnv, name: string): string[] {
  const ranges = (env[name] ?? '')
    .split(',')
    .map((range) => range.trim())
    .filter(Boolean);
  for (const range of ranges) {
    const [address, prefix] = range.split('/');
    const family = isIP(address);
    const bits = family === 6 ? 128 : 32;
    if (!family || (prefix !== undefined && !(/^\d+$/.test(prefix) && Number(prefix) <= bits))) {
      throw new ConfigError(`${name} must be comma-separated addresses or CIDR ranges, got "${range}"`);
    }
  }
  return ranges;
}

/** Comma-separated base64 keys of 32 bytes. */
function encryptionKeys(env: NodeJS.ProcessEnv, name: string): Buffer[] {
  return (env[name] ?? '')
    .split(',')
    .map((key) => key.trim())
    .filter(Boolean)
    .map((key, index) => {
      try {
        return parseEncryptionKey(key);
      } catch (error) {
        throw new ConfigError(`${name}: key ${index + 1}: ${(error as Error).message}`);
      }
    });
}

/** A URL with one of `schemes`, or a one-line ConfigError naming the variable (never echoing a URL that may hold a password). */
function url(env: NodeJS.ProcessEnv, name: string, schemes: string[], fallback?: string): string | undefined {
  const raw = env[name] || fallback;
  if (raw === undefined) return undefined;
  if (!URL.canParse(raw) || !schemes.includes(new URL(raw).protocol)) {
    throw new ConfigError(`${name} must be a ${schemes.map((s) => `${s}//`).join(' or ')} URL`);
  }
  return raw;
}

/** Comma-separated whole numbers of seconds. */
function secondsList(env: NodeJS.ProcessEnv, name: string, fallback: number[]): number[] {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const parts = raw.split(',').map((part) => part.trim());
  if (parts.length > 20 || !parts.every((part) => /^\d{1,7}$/.test(part))) {
    throw new ConfigError(`${name} must be up to 20 comma-separated whole numbers of seconds, got "${raw}"`);
  }
  return parts.map(Number);
}

function oneOf(env: NodeJS.ProcessEnv, name: string, allowed: string[], fallback: string): string {
  const raw = env[name] || fallback;
  if (!allowed.includes(raw)) throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${raw}"`);
  return raw;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const databaseUrl = url(env, 'DATABASE_URL', ['postgres:', 'postgresql:']);
  return {
    host: env.HOST || '127.0.0.1',
    port: integer(env, 'PORT', 8080, 0, 65535),
    dataDir: path.resolve(env.DPC_DATA_DIR || './data'),
    databaseUrl,
    issuer: env.DPC_ISSUER || 'platform-api',
    audience: env.DPC_AUDIENCE || 'https://api.matillion.com',
    tokenTtlSeconds: integer(env, 'DPC_TOKEN_TTL_SECONDS', 1800),
    revocationRefreshSeconds: integer(env, 'DPC_REVOCATION_REFRESH_SECONDS', 5, 1),
    bodyLimit: integer(env, 'DPC_BODY_LIMIT', 1024 * 1024),
    uploadMaxParts: integer(env, 'DPC_UPLOAD_MAX_PARTS', 20_000),
    uploadMaxPartBytes: integer(env, 'DPC_UPLOAD_MAX_PART_BYTES', 10 * 1024 * 1024),
    uploadMaxBytes: integer(env, 'DPC_UPLOAD_MAX_BYTES', 256 * 1024 * 1024),
    uploadConcurrency: integer(env, 'DPC_UPLOAD_CONCURRENCY', 4),
    uploadQueueTimeoutMs: integer(env, 'DPC_UPLOAD_QUEUE_TIMEOUT_MS', 60_000),
    stagingDir: env.DPC_STAGING_DIR ? path.resolve(env.DPC_STAGING_DIR) : undefined,
    repositoriesDir: env.DPC_REPOSITORIES_DIR ? path.resolve(env.DPC_REPOSITORIES_DIR) : undefined,
    jobLeaseMs: integer(env, 'DPC_JOB_LEASE_MS', 5 * 60_000, 1000),
    gitlabApiUrl: url(env, 'DPC_GITLAB_API_URL', ['http:', 'https:']),
    gitTimeoutMs: integer(env, 'DPC_GIT_TIMEOUT_SECONDS', 600, 1) * 1000,
    gitLowSpeedLimit: integer(env, 'DPC_GIT_LOW_SPEED_LIMIT', 1000, 1),
    gitLowSpeedSeconds: integer(env, 'DPC_GIT_LOW_SPEED_SECONDS', 60, 1),
    gitMaxPushBytes: integer(env, 'DPC_GIT_MAX_PUSH_BYTES', 512 * 1024 * 1024, 1024),
    rateLimitMax: integer(env, 'DPC_RATE_LIMIT_MAX', 6000),
    rateLimitWindowMs: integer(env, 'DPC_RATE_LIMIT_WINDOW_MS', 60_000),
    problemTypeBase: url(env, 'DPC_PROBLEM_TYPE_BASE', ['http:', 'https:'], 'https://platform-api.dev/problems')!.replace(
      /\/+$/,
      '',
    ),
    logLevel: oneOf(env, 'LOG_LEVEL', LOG_LEVELS, 'info'),
    runJobs: oneOf(env, 'DPC_RUN_JOBS', ['true', 'false'], 'true') === 'true',
    hostedAgent: oneOf(env, 'DPC_HOSTED_AGENT', ['true', 'false'], 'true') === 'true',
    hostedWarehouseUrl: url(env, 'DPC_HOSTED_WAREHOUSE_URL', ['postgres:', 'postgresql:']),
    rememberReads: oneOf(env, 'DPC_REMEMBER_READS', ['true', 'false'], 'true') === 'true',
    outboundAllowedRanges: addressRanges(env, 'DPC_OUTBOUND_ALLOW'),
    outboundTimeoutMs: integer(env, 'DPC_OUTBOUND_TIMEOUT_MS', 10_000),
    outboundMaxResponseBytes: integer(env, 'DPC_OUTBOUND_MAX_RESPONSE_BYTES', 1024 * 1024),
    outboundMaxRedirects: integer(env, 'DPC_OUTBOUND_MAX_REDIRECTS', 5),
    outboundCaFile: env.DPC_OUTBOUND_CA_FILE ? path.resolve(env.DPC_OUTBOUND_CA_FILE) : undefined,
    encryptionKeys: encryptionKeys(env, 'DPC_ENCRYPTION_KEYS'),
    metrics: oneOf(env, 'DPC_METRICS', ['true', 'false'], 'true') === 'true',
    metricsToken: env.DPC_METRICS_TOKEN || undefined,
    shutdownDrainMs: integer(env, 'DPC_SHUTDOWN_DRAIN_MS', 0),
    shutdownTimeoutMs: integer(env, 'DPC_SHUTDOWN_TIMEOUT_MS', 10_000),
    executionLostAfterMs: integer(env, 'DPC_EXECUTION_LOST_AFTER_SECONDS', 120, 1) * 1000,
    schedulerIntervalMs: integer(env, 'DPC_SCHEDULER_INTERVAL_MS', 1000, 50),
    scheduleCatchUpMs: integer(env, 'DPC_SCHEDULE_CATCH_UP_SECONDS', 300) * 1000,
    agentConnectedWindowSeconds: integer(env, 'DPC_AGENT_CONNECTED_WINDOW_SECONDS', 30, 3, 3600),
    agentWorkLeaseSeconds: integer(env, 'DPC_AGENT_WORK_LEASE_SECONDS', 60, 1, 86_400),
    agentPollMaxWaitSeconds: integer(env, 'DPC_AGENT_POLL_MAX_WAIT_SECONDS', 25, 1, 300),
    secretWriteTimeoutSeconds: integer(env, 'DPC_SECRET_WRITE_TIMEOUT_SECONDS', 30, 1, 600),
    aiModel: {
      name: env.DPC_AI_MODEL || undefined,
      baseUrl: url(env, 'DPC_AI_MODEL_BASE_URL', ['http:', 'https:']),
      apiKey: env.DPC_AI_MODEL_API_KEY || undefined,
      timeoutMs: integer(env, 'DPC_AI_MODEL_TIMEOUT_MS', 120_000, 1),
      maxTurns: integer(env, 'DPC_AI_MAX_TURNS', 50, 1),
      maxToolCalls: integer(env, 'DPC_AI_MAX_TOOL_CALLS', 200, 1),
      maxTaskSeconds: integer(env, 'DPC_AI_MAX_TASK_SECONDS', 1800, 1),
    },
    creditsPerHour: creditRates(env, 'DPC_CREDITS_PER_HOUR'),
    eventsRetentionDays: integer(env, 'DPC_EVENTS_RETENTION_DAYS', 30, 1, 3650),
    eventsPollMs: integer(env, 'DPC_EVENTS_POLL_MS', 1000, 50, 60_000),
    eventsHeartbeatSeconds: integer(env, 'DPC_EVENTS_HEARTBEAT_SECONDS', 15, 1, 300),
    eventsStreamsPerClient: integer(env, 'DPC_EVENTS_STREAMS_PER_CLIENT', 20, 1, 100_000),
    // 1 min, 5 min, 30 min, 2 h, 6 h, 18 h: seven tries over 26.6 hours.
    webhookRetrySeconds: secondsList(env, 'DPC_WEBHOOK_RETRY_SECONDS', [60, 300, 1800, 7200, 21_600, 64_800]),
    webhookDisableAfter: integer(env, 'DPC_WEBHOOK_DISABLE_AFTER', 5, 1, 1000),
    webhookConcurrency: integer(env, 'DPC_WEBHOOK_CONCURRENCY', 16, 1, 1000),
    openLineageUrl: httpUrl(env, 'DPC_OPENLINEAGE_URL'),
    openLineageAttempts: integer(env, 'DPC_OPENLINEAGE_ATTEMPTS', 12, 1, 1000),
    lineage: oneOf(env, 'DPC_LINEAGE', ['true', 'false'], 'true') === 'true',
  };
}
