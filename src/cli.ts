import { parseArgs } from 'node:util';
import { loadConfig } from './core/config.ts';
import { migrate, openStore, type Store } from './core/db/database.ts';
import { createAccount, createClient, isRole, ROLES } from './core/auth/accounts.ts';
import { KeyRing } from './core/auth/keys.ts';
import { startServer } from './server.ts';

const HELP = `dpc: the platform-api server and its administration

Usage: dpc <command> [options]

Commands:
  serve                         Start the server (what "npm start" runs). Migrations are applied first.
  migrate                       Apply pending schema migrations and exit.
  accounts create --name NAME   Create an account with an admin API client; prints
                                {"accountId","clientId","clientSecret"}.
  clients create --account ACCOUNT_ID --role admin|developer|viewer [--name NAME]
                                Create an API client in an account; prints {"clientId","clientSecret"}.
  keys rotate                   Start signing tokens with a new key. Tokens signed with the previous
                                key stay valid until they expire.

Every command works on the store the server uses: PostgreSQL when DATABASE_URL is set, else SQLite
under DPC_DATA_DIR (default ./data). See the README for every setting.
`;

class UsageError extends Error {}

async function withStore<T>(work: (store: Store) => Promise<T>): Promise<T> {
  const store = openStore(loadConfig());
  try {
    await migrate(store);
    return await work(store);
  } finally {
    await store.close();
  }
}

function required(value: string | undefined, flag: string): string {
  if (!value) throw new UsageError(`${flag} is required`);
  return value;
}

async function main(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      account: { type: 'string' },
      role: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const command = positionals.join(' ');
  if (values.help || command === '' || command === 'help') {
    process.stdout.write(HELP);
    return;
  }
  switch (command) {
    case 'serve': {
      const config = loadConfig();
      const server = await startServer(config);
      const stop = (signal: string) => {
        server.app.log.info({ signal }, 'shutting down');
        server.close().then(
          () => process.exit(0),
          (error) => {
            server.app.log.error({ err: error }, 'shutdown failed');
            process.exit(1);
          },
        );
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
      return;
    }
    case 'migrate': {
      const store = openStore(loadConfig());
      const applied = await migrate(store).finally(() => store.close());
      process.stdout.write(`${JSON.stringify({ migrated: applied })}\n`);
      return;
    }
    case 'accounts create': {
      const name = required(values.name, '--name');
      process.stdout.write(`${JSON.stringify(await withStore((store) => createAccount(store.db, name)))}\n`);
      return;
    }
    case 'clients create': {
      const accountId = required(values.account, '--account');
      const role = required(values.role, '--role');
      if (!isRole(role)) throw new UsageError(`--role must be one of ${ROLES.join(', ')}`);
      const credentials = await withStore((store) => createClient(store.db, accountId, role, values.name));
      process.stdout.write(`${JSON.stringify(credentials)}\n`);
      return;
    }
    case 'keys rotate': {
      const { tokenTtlSeconds } = loadConfig();
      const { kid } = await withStore((store) => new KeyRing(store.db, tokenTtlSeconds).rotate());
      process.stdout.write(`${JSON.stringify({ kid })}\n`);
      return;
    }
    default:
      throw new UsageError(`unknown command "${command}"`);
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`dpc: ${message}\n`);
  if (error instanceof UsageError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
    process.stderr.write('Run "dpc --help" for usage.\n');
    process.exitCode = 2;
  } else {
    process.exitCode = 1;
  }
});
