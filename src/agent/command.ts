import path from 'node:path';
import { CliError, EXIT, required, type Command } from '../cli/command.ts';

export const agentRunCommand: Command = {
  name: 'agent run',
  summary: 'Run the reference agent: heartbeats, takes work from the server, keeps secrets in its vault.',
  details:
    'Makes its RSA key pair and self-signed certificate on first start and keeps them in the state folder\n' +
    '(mode 0700; files 0600), with the local vault file (vault.json, 0600). The secret may be given in\n' +
    'DPC_AGENT_CLIENT_SECRET instead of on the command line. Stops cleanly on SIGTERM or SIGINT.\n' +
    "Pipelines run on the environment's warehouse; without one, on DPC_AGENT_WAREHOUSE_URL (PostgreSQL, a\n" +
    'schema per account and environment) when set, else an embedded DuckDB file in the state folder. With\n' +
    'DPC_AGENT_WAREHOUSE_ROLE_KEY too, each schema is owned by a role of its own that the run connects as.\n' +
    'Logs one JSON line per event on stdout; secret values are never logged.',
  options: {
    url: { type: 'string' },
    'client-id': { type: 'string' },
    'client-secret': { type: 'string' },
    'state-dir': { type: 'string' },
    'allow-scripts': { type: 'boolean' },
    'statement-timeout': { type: 'string' },
    hosted: { type: 'boolean' },
    'object-store': { type: 'string' },
    'blob-endpoint': { type: 'string' },
  },
  optionHelp: {
    url: 'the server, e.g. http://127.0.0.1:8080',
    'client-id': 'the agent client id (POST /v1/agents/{agentId}/credentials)',
    'client-secret': 'its secret (or DPC_AGENT_CLIENT_SECRET)',
    'state-dir': 'where the key, certificate, vault and embedded warehouse are kept (default ./agent-state)',
    'allow-scripts': 'let pipelines run python-script and bash-script components (off by default)',
    'statement-timeout': 'seconds one warehouse statement may run before it is cancelled (default 3600; 0: no bound)',
    'object-store':
      'what serves s3 streaming targets: file:///folder keeps each bucket as a folder there (or DPC_AGENT_OBJECT_STORE)',
    'blob-endpoint':
      'the Azure Blob endpoint of abs streaming targets, {account} standing for the account name (default https://{account}.blob.core.windows.net; or DPC_AGENT_BLOB_ENDPOINT)',
    hosted: 'run as a platform-hosted agent: no scripts, the embedded warehouse without file system or network access',
  },
  async run({ values, out }) {
    const url = required(values, 'url');
    if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol))
      throw new CliError(`--url must be an http(s) URL`, EXIT.usage);
    const timeout = values['statement-timeout'] === undefined ? 3600 : Number(values['statement-timeout']);
    if (!Number.isInteger(timeout) || timeout < 0)
      throw new CliError('--statement-timeout must be a whole number of seconds', EXIT.usage);
    const objectStore = (values['object-store'] as string | undefined) || process.env.DPC_AGENT_OBJECT_STORE;
    if (objectStore && !URL.canParse(objectStore))
      throw new CliError('--object-store must be a URL such as file:///var/lib/cdc', EXIT.usage);
    const giveUpSeconds = process.env.DPC_AGENT_GIVE_UP_AFTER_REFUSED_SECONDS;
    if (
      giveUpSeconds !== undefined &&
      giveUpSeconds !== '' &&
      !(Number.isInteger(Number(giveUpSeconds)) && Number(giveUpSeconds) > 0)
    )
      throw new CliError('DPC_AGENT_GIVE_UP_AFTER_REFUSED_SECONDS must be a whole number of seconds, 1 or more', EXIT.config);
    const blobEndpoint = (values['blob-endpoint'] as string | undefined) || process.env.DPC_AGENT_BLOB_ENDPOINT;
    if (blobEndpoint && !URL.canParse(blobEndpoint.replaceAll('{account}', 'account')))
      throw new CliError('--blob-endpoint must be a URL such as http://127.0.0.1:10000/{account}', EXIT.usage);
    const clientSecret = (values['client-secret'] as string | undefined) || process.env.DPC_AGENT_CLIENT_SECRET;
    if (!clientSecret) throw new CliError('--client-secret (or DPC_AGENT_CLIENT_SECRET) is required', EXIT.usage);
    const log = (level: string, msg: string, fields?: Record<string, unknown>) =>
      out.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
    // Loaded here, not with the command table: the agent's X.509 library stays out of every other dpc command's start.
    const { runAgent } = await import('./run.ts');
    const agent = await runAgent({
      url,
      clientId: required(values, 'client-id'),
      clientSecret,
      stateDir: path.resolve((values['state-dir'] as string | undefined) || './agent-state'),
      allowScripts: values['allow-scripts'] === true,
      hosted: values.hosted === true,
      statementTimeoutSeconds: timeout,
      // Read from the environment only: it may hold a password, which a command line would show to `ps`.
      defaultWarehouseUrl: process.env.DPC_AGENT_WAREHOUSE_URL || undefined,
      warehouseRoleKey: process.env.DPC_AGENT_WAREHOUSE_ROLE_KEY || undefined,
      objectStore: objectStore || undefined,
      ...(giveUpSeconds && { giveUpAfterRefusedMs: Number(giveUpSeconds) * 1000 }),
      blobEndpoint: blobEndpoint || undefined,
      log,
    }).catch((error: Error) => {
      throw new CliError(`the agent could not start: ${error.message}`, EXIT.unreachable);
    });
    const gaveUp = await new Promise<string | undefined>((resolve) => {
      const stop = (signal: string) => {
        log('info', 'stopping', { signal });
        agent.stop().then(
          () => resolve(undefined),
          () => resolve(undefined),
        );
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
      // Credentials refused without a break (a deleted agent): it exits non-zero rather than asking for ever.
      void agent.ended.then(resolve);
    });
    if (gaveUp !== undefined) throw new CliError(`the agent stopped: ${gaveUp}`, EXIT.unreachable);
  },
};
