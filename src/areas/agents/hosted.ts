/**
 * The platform-hosted agents: one agent per account that the server processes run themselves, for
 * environments without a default agent. Each is an ordinary agent (type PLATFORM_HOSTED) taking work from
 * the same queue over the agent protocol, so any server instance may run the work. Every instance runs one
 * reference-agent process (`dpc agent run`, a child process: the server does not import the agent) per
 * hosted agent; the queue hands each piece of work to one of them. Scripts are never allowed there. Their
 * warehouse is DPC_HOSTED_WAREHOUSE_URL (PostgreSQL, a schema per account and environment, each owned by a
 * role of its own that the environment's runs connect as: DPC_AGENT_WAREHOUSE_ROLE_KEY) when set, else
 * the agent's embedded DuckDB file under the server's data folder (one process: SQLite deployments).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../core/config.ts';
import type { Db, Executor } from '../../core/db/database.ts';
import type { SecretBox } from '../../core/secret-box.ts';
import { agentNamed, readAgentCredentials } from './service.ts';

export const HOSTED_AGENT_NAME = 'platform-hosted';
/** The type of the account's platform-hosted agent (runs on it are priced by it: consumption). */
export const HOSTED_TYPE = 'PLATFORM_HOSTED';
const DPC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../bin/dpc.js');
/** How often each instance looks for hosted agents it does not run yet (created by another instance). */
const SWEEP_MS = 5000;

/** The account's platform-hosted agent, created on first need (a 409 if a customer agent took its name). */
export function hostedAgentOf(db: Executor, accountId: string): Promise<string> {
  return agentNamed(db, accountId, {
    name: HOSTED_AGENT_NAME,
    description: 'Run by the platform for environments without a default agent',
    agentType: HOSTED_TYPE,
    cloudProvider: 'aws',
    deployment: 'fargate',
  });
}

/** The reference-agent processes this server instance runs for the hosted agents. */
export class HostedAgents {
  private readonly running = new Map<string, ChildProcess>();
  private stopping = false;
  private timer?: NodeJS.Timeout;
  private url?: string;

  constructor(
    private readonly db: Db,
    private readonly box: SecretBox,
    private readonly config: Config,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Starts the sweep once the server listens at `url`. */
  start(url: string): void {
    if (!this.config.hostedAgent) return;
    this.url = url;
    const sweep = () => {
      this.sweep()
        .catch((error: unknown) => this.log.warn({ err: error }, 'hosted agents: sweep failed'))
        .finally(() => {
          if (!this.stopping) this.timer = setTimeout(sweep, SWEEP_MS);
        });
    };
    sweep();
  }

  /** Makes sure this instance runs the process of hosted agent `agentId` (called when a run is queued for it). */
  async ensure(accountId: string, agentId: string): Promise<void> {
    if (!this.url || this.stopping || this.running.has(agentId)) return;
    const credentials = await readAgentCredentials(this.db, this.box, accountId, agentId);
    if (this.running.has(agentId) || this.stopping) return;
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DPC_AGENT_CLIENT_SECRET: credentials.clientSecret,
      // The operator's warehouse, where each account's environment runs as a role of its own (docs/warehouses.md).
      ...(this.config.hostedWarehouseUrl && {
        DPC_AGENT_WAREHOUSE_URL: this.config.hostedWarehouseUrl,
        DPC_AGENT_WAREHOUSE_ROLE_KEY: this.box.derive('hosted warehouse roles').toString('base64'),
      }),
    };
    const child = spawn(
      process.execPath,
      [
        DPC,
        'agent',
        'run',
        '--url',
        this.url,
        '--client-id',
        credentials.clientId,
        '--state-dir',
        path.join(this.config.dataDir, 'hosted-agents', agentId),
        '--hosted',
      ],
      { env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.running.set(agentId, child);
    const relay = (chunk: Buffer) => {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) this.log.info({ hostedAgentId: agentId }, line);
    };
    child.stdout!.on('data', relay);
    child.stderr!.on('data', relay);
    child.once('exit', (code) => {
      this.running.delete(agentId);
      if (!this.stopping) this.log.warn({ hostedAgentId: agentId, code }, 'hosted agent exited; the next sweep starts it again');
    });
  }

  private async sweep(): Promise<void> {
    const rows = await this.db
      .selectFrom('agents')
      .select(['id', 'accountId'])
      .where('agentType', '=', HOSTED_TYPE)
      .where('name', '=', HOSTED_AGENT_NAME)
      .execute();
    for (const row of rows) await this.ensure(row.accountId, row.id);
    // A hosted agent deleted since (on any instance): its process would only be refused from now on.
    const kept = new Set(rows.map((row) => row.id));
    for (const [agentId, child] of this.running) {
      if (kept.has(agentId)) continue;
      this.log.info({ hostedAgentId: agentId }, 'hosted agent deleted; its process is stopped');
      child.kill('SIGTERM');
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.timer);
    const exits = [...this.running.values()].map(
      (child) => new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', () => resolve()))),
    );
    for (const child of this.running.values()) child.kill('SIGTERM');
    await Promise.race([Promise.all(exits), new Promise((resolve) => setTimeout(resolve, 5000))]);
    for (const child of this.running.values()) child.kill('SIGKILL');
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The platform-hosted agents' processes of this instance (see HostedAgents). */
    hostedAgents: HostedAgents;
  }
}
