import { loadConfig, type Config } from '../core/config.ts';
import { migrate, openStore, type Store } from '../core/db/database.ts';
import { createAccount, createClient, isRole, listAccounts, listClients, revokeClient, ROLES } from '../core/auth/accounts.ts';
import { KeyRing } from '../core/auth/keys.ts';
import { SecretBox } from '../core/secret-box.ts';
import { printJson, printList, required, UsageError, type Command } from './command.ts';

/** Runs `work` on the store of the configuration, migrated first. */
async function withStore<T>(work: (store: Store, config: Config) => Promise<T>): Promise<T> {
  const config = loadConfig();
  const store = openStore(config);
  try {
    await migrate(store);
    return await work(store, config);
  } finally {
    await store.close();
  }
}

function keyRingOf(store: Store, config: Config): KeyRing {
  return new KeyRing(store.db, config.tokenTtlSeconds, SecretBox.fromConfig(config));
}

/** The configuration as the server would use it, secrets masked: a DATABASE_URL password and the encryption keys. */
export function maskedConfig(config: Config): Record<string, unknown> {
  let databaseUrl = config.databaseUrl;
  if (databaseUrl) {
    const url = new URL(databaseUrl);
    if (url.password) url.password = '***';
    databaseUrl = url.toString();
  }
  let hostedWarehouseUrl = config.hostedWarehouseUrl;
  if (hostedWarehouseUrl) {
    const url = new URL(hostedWarehouseUrl);
    if (url.password) url.password = '***';
    hostedWarehouseUrl = url.toString();
  }
  return {
    ...config,
    databaseUrl,
    hostedWarehouseUrl,
    encryptionKeys: config.encryptionKeys.map(() => '***'),
    metricsToken: config.metricsToken ? '***' : undefined,
    aiModel: { ...config.aiModel, apiKey: config.aiModel.apiKey ? '***' : undefined },
  };
}

export const storeCommands: Command[] = [
  {
    name: 'migrate',
    summary: 'Apply pending schema migrations and exit; prints {"migrated":[...]}.',
    async run({ out }) {
      const store = openStore(loadConfig());
      const applied = await migrate(store).finally(() => store.close());
      printJson(out, { migrated: applied });
    },
  },
  {
    name: 'config',
    summary:
      'Print the effective configuration as JSON, secrets masked (DATABASE_URL password, DPC_ENCRYPTION_KEYS, DPC_AI_MODEL_API_KEY).',
    details: 'Exits 3 with a one-line reason when a setting is not valid, as "dpc serve" would.',
    async run({ out }) {
      printJson(out, maskedConfig(loadConfig()));
    },
  },
  {
    name: 'accounts create',
    summary: 'Create an account with an admin API client; prints {"accountId","clientId","clientSecret"}.',
    options: { name: { type: 'string' } },
    optionHelp: { name: "the account's name (required)" },
    async run({ values, out }) {
      const name = required(values, 'name');
      printJson(out, await withStore((store) => createAccount(store.db, name)));
    },
  },
  {
    name: 'accounts list',
    summary: 'List the accounts: [{"accountId","name","createdAt"}].',
    lists: true,
    async run(invocation) {
      const accounts = await withStore((store) => listAccounts(store.db));
      printList(invocation, accounts, ['accountId', 'name', 'createdAt']);
    },
  },
  {
    name: 'clients create',
    summary: 'Create an API client in an account; prints {"clientId","clientSecret"} (the secret is shown once).',
    options: { account: { type: 'string' }, role: { type: 'string' }, name: { type: 'string' } },
    optionHelp: { account: 'account id (required)', role: `${ROLES.join('|')} (required)`, name: "the client's name" },
    async run({ values, out }) {
      const accountId = required(values, 'account');
      const role = required(values, 'role');
      if (!isRole(role)) throw new UsageError(`--role must be one of ${ROLES.join(', ')}`);
      const name = typeof values.name === 'string' ? values.name : undefined;
      printJson(out, await withStore((store) => createClient(store.db, accountId, role, name)));
    },
  },
  {
    name: 'clients list',
    summary: 'List the API clients of an account, revoked ones too: [{"clientId","name","role","createdAt","revokedAt"}].',
    options: { account: { type: 'string' } },
    optionHelp: { account: 'account id (required)' },
    lists: true,
    async run(invocation) {
      const accountId = required(invocation.values, 'account');
      const clients = await withStore((store) => listClients(store.db, accountId));
      printList(invocation, clients, ['clientId', 'name', 'role', 'createdAt', 'revokedAt']);
    },
  },
  {
    name: 'clients revoke',
    usage: 'CLIENT_ID',
    summary: 'Revoke an API client; prints {"clientId","revokedAt"}.',
    details:
      'The client gets no new token at once, and every server process refuses its tokens within\n' +
      'DPC_REVOCATION_REFRESH_SECONDS (default 5). Revoking a revoked client changes nothing.',
    async run({ args, out }) {
      if (args.length !== 1) throw new UsageError('give exactly one CLIENT_ID');
      printJson(out, await withStore((store) => revokeClient(store.db, args[0])));
    },
  },
  {
    name: 'keys rotate',
    summary: 'Start signing tokens with a new key; tokens of the previous key stay valid until they expire.',
    async run({ out }) {
      const { kid } = await withStore((store, config) => keyRingOf(store, config).rotate());
      printJson(out, { kid });
    },
  },
  {
    name: 'secrets reseal',
    summary:
      'Seal every secret kept in the store with the first key of DPC_ENCRYPTION_KEYS (after a new key was put first); prints {"resealed":N}.',
    async run({ out }) {
      const resealed = await withStore((store, config) => keyRingOf(store, config).reseal());
      printJson(out, { resealed });
    },
  },
];
