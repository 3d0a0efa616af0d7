import path from 'node:path';

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
  /** Largest JSON body accepted, in bytes (413 past it). */
  bodyLimit: number;
  /** Artifact uploads (multipart): most parts, largest part and largest total of part contents, in bytes (413 past them). */
  uploadMaxParts: number;
  uploadMaxPartBytes: number;
  uploadMaxBytes: number;
  /** Requests per client per window; 0 turns rate limiting off. */
  rateLimitMax: number;
  rateLimitWindowMs: number;
  problemTypeBase: string;
  logLevel: string;
  /** Whether this process runs background jobs. */
  runJobs: boolean;
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a non-negative integer, got "${raw}"`);
  return value;
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const databaseUrl = env.DATABASE_URL || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new Error('DATABASE_URL must be a postgres:// URL');
  }
  return {
    host: env.HOST || '127.0.0.1',
    port: integer(env, 'PORT', 8080),
    dataDir: path.resolve(env.DPC_DATA_DIR || './data'),
    databaseUrl,
    issuer: env.DPC_ISSUER || 'platform-api',
    audience: env.DPC_AUDIENCE || 'https://api.matillion.com',
    tokenTtlSeconds: integer(env, 'DPC_TOKEN_TTL_SECONDS', 1800),
    bodyLimit: integer(env, 'DPC_BODY_LIMIT', 1024 * 1024),
    uploadMaxParts: integer(env, 'DPC_UPLOAD_MAX_PARTS', 20_000),
    uploadMaxPartBytes: integer(env, 'DPC_UPLOAD_MAX_PART_BYTES', 10 * 1024 * 1024),
    uploadMaxBytes: integer(env, 'DPC_UPLOAD_MAX_BYTES', 256 * 1024 * 1024),
    rateLimitMax: integer(env, 'DPC_RATE_LIMIT_MAX', 6000),
    rateLimitWindowMs: integer(env, 'DPC_RATE_LIMIT_WINDOW_MS', 60_000),
    problemTypeBase: (env.DPC_PROBLEM_TYPE_BASE || 'https://platform-api.dev/problems').replace(/\/+$/, ''),
    logLevel: env.LOG_LEVEL || 'info',
    runJobs: env.DPC_RUN_JOBS !== 'false',
  };
}
