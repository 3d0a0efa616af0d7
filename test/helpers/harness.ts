import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { describe } from 'node:test';
import pg from 'pg';
import { loadConfig, type Config } from '../../src/core/config.ts';
import { createAccount, createClient, type Role } from '../../src/core/auth/accounts.ts';
import { startServer, type RunningServer } from '../../src/server.ts';

export type StoreKind = 'sqlite' | 'postgres';

const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL;

/**
 * Runs `suite` once per store: always on SQLite, and on PostgreSQL when TEST_DATABASE_URL is set
 * (skipped with a visible reason otherwise; CI always sets it).
 */
export function describeEachStore(title: string, suite: (kind: StoreKind) => void): void {
  describe(`${title} [sqlite]`, () => suite('sqlite'));
  describeOnPostgres(title, () => suite('postgres'));
}

/** A suite that needs PostgreSQL itself: run when TEST_DATABASE_URL is set, skipped visibly otherwise. */
export function describeOnPostgres(title: string, suite: () => void): void {
  if (TEST_DATABASE_URL) describe(`${title} [postgres]`, suite);
  else describe(`${title} [postgres]`, { skip: 'TEST_DATABASE_URL is not set' }, () => {});
}

export interface Answer<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface Caller {
  accountId: string;
  clientId: string;
  clientSecret: string;
  token: string;
}

/** Runs one statement on the PostgreSQL server of TEST_DATABASE_URL. */
async function onTestServer(statement: string): Promise<void> {
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(statement);
  } finally {
    await admin.end();
  }
}

/**
 * A scratch store of its own: a temporary folder for SQLite, a fresh database for PostgreSQL. A database
 * rather than a schema, because PostgreSQL's catalog is per database: Kysely's migrator looks over every
 * schema's tables, and a schema that another test file drops at that moment fails the look.
 */
export async function scratchStore(kind: StoreKind): Promise<{ settings: Partial<Config>; drop(): Promise<void> }> {
  if (kind === 'sqlite') {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-test-'));
    return { settings: { dataDir, databaseUrl: undefined }, drop: async () => rmSync(dataDir, { recursive: true, force: true }) };
  }
  const database = `dpc_test_${randomBytes(6).toString('hex')}`;
  await onTestServer(`create database ${database}`);
  const url = new URL(TEST_DATABASE_URL!);
  url.pathname = `/${database}`;
  // A data folder of its own too: the encryption key file and upload staging live there on either store.
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-test-'));
  return {
    settings: { databaseUrl: url.toString(), dataDir },
    drop: async () => {
      rmSync(dataDir, { recursive: true, force: true });
      await onTestServer(`drop database if exists ${database} with (force)`);
    },
  };
}

/** A real server on a loopback port over a scratch store, and a client that speaks HTTP to it. */
export class TestServer {
  private constructor(
    readonly server: RunningServer,
    readonly config: Config,
    private readonly drop: () => Promise<void>,
  ) {}

  static async start(kind: StoreKind, overrides: Partial<Config> = {}, logger: unknown = false): Promise<TestServer> {
    const scratch = await scratchStore(kind);
    const config: Config = {
      ...loadConfig({}),
      host: '127.0.0.1',
      port: 0,
      rateLimitMax: 0,
      ...scratch.settings,
      ...overrides,
    };
    try {
      return new TestServer(await startServer(config, logger as never), config, scratch.drop);
    } catch (error) {
      await scratch.drop();
      throw error;
    }
  }

  /** Another server process over the same store, as in a deployment of several (its close leaves the store). */
  static async startBeside(other: TestServer, overrides: Partial<Config> = {}): Promise<TestServer> {
    const config = { ...other.config, ...overrides };
    return new TestServer(await startServer(config, false as never), config, async () => {});
  }

  get url(): string {
    return this.server.url;
  }

  get db() {
    return this.server.app.store.db;
  }

  async close(): Promise<void> {
    await this.server.close();
    await this.drop();
  }

  /** Sends a request; `body` is sent as JSON unless it is a string or FormData. */
  async request<T = any>(
    method: string,
    urlPath: string,
    options: { token?: string; body?: unknown; headers?: Record<string, string> } = {},
  ): Promise<Answer<T>> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token) headers.authorization = `Bearer ${options.token}`;
    let body: BodyInit | undefined;
    if (
      typeof options.body === 'string' ||
      options.body instanceof Uint8Array ||
      options.body instanceof FormData ||
      options.body instanceof URLSearchParams
    ) {
      body = options.body as BodyInit;
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] ??= 'application/json';
    }
    const response = await fetch(`${this.url}${urlPath}`, { method, headers, body });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON: the text is the body.
    }
    return { status: response.status, headers: response.headers, body: parsed as T, text };
  }

  /** A request to an operation under /dpc/v1. */
  api<T = any>(method: string, urlPath: string, options: Parameters<TestServer['request']>[2] = {}) {
    return this.request<T>(method, `/dpc/v1${urlPath}`, options);
  }

  async token(clientId: string, clientSecret: string): Promise<string> {
    const answer = await this.request('POST', '/oauth/dpc/token', {
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
    });
    if (answer.status !== 200) throw new Error(`token request failed: ${answer.status} ${answer.text}`);
    return answer.body.access_token;
  }

  /** A new account and a token of its admin client. */
  async newAccount(name = 'test account'): Promise<Caller> {
    const credentials = await createAccount(this.db, name);
    return { ...credentials, token: await this.token(credentials.clientId, credentials.clientSecret) };
  }

  /** A token of a new client with `role` in the account. */
  async tokenFor(accountId: string, role: Role): Promise<string> {
    const { clientId, clientSecret } = await createClient(this.db, accountId, role);
    return this.token(clientId, clientSecret);
  }

  /**
   * The prologue most suites share: a new account (its admin client is `caller`), a viewer's and a
   * developer's token, and, unless `project` is false, a project with `environments` (none unless named).
   */
  async prologue(options: { project?: boolean; environments?: readonly string[] } = {}) {
    const caller = await this.newAccount();
    const [viewer, developer] = await Promise.all([
      this.tokenFor(caller.accountId, 'viewer'),
      this.tokenFor(caller.accountId, 'developer'),
    ]);
    const projectId = options.project === false ? '' : await this.newProject(caller);
    for (const name of options.environments ?? []) {
      const answer = await this.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name } });
      if (answer.status !== 201) throw new Error(`environment create failed: ${answer.status} ${answer.text}`);
    }
    return { caller, viewer, developer, projectId };
  }

  /** A new project in the caller's account; its id. */
  async newProject(caller: Caller, name = `project ${randomBytes(4).toString('hex')}`): Promise<string> {
    const answer = await this.api('POST', '/projects', { token: caller.token, body: { name } });
    if (answer.status !== 201) throw new Error(`project create failed: ${answer.status} ${answer.text}`);
    return answer.body.projectId;
  }
}

/** Asserts the shape every error answer has, and returns the body. */
export function expectProblem(answer: Answer, status: number, typeName?: string) {
  const problem = answer.body;
  const ok =
    answer.status === status &&
    answer.headers.get('content-type')?.startsWith('application/problem+json') &&
    problem?.status === status &&
    typeof problem.title === 'string' &&
    typeof problem.detail === 'string' &&
    typeof problem.instance === 'string' &&
    typeof problem.type === 'string' &&
    (!typeName || problem.type.endsWith(`/${typeName}`));
  if (!ok) {
    throw new Error(
      `expected a ${status}${typeName ? ` ${typeName}` : ''} problem, got ${answer.status} ${answer.headers.get('content-type')} ${answer.text}`,
    );
  }
  return problem as { type: string; title: string; status: number; detail: string; instance: string; violations?: string[] };
}
