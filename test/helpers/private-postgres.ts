/**
 * A PostgreSQL cluster of a test's own: initdb and pg_ctl from the installed binaries
 * (/usr/lib/postgresql/<version>/bin), in a temporary folder, on a free loopback port, with the settings
 * the test asks for (wal_level=logical for change data capture). Password authentication over TCP, so that
 * a client that does not read its password from where it should fails. Run as the `postgres` user when the
 * tests run as root (initdb refuses root). `stop()` tears it down and removes the folder.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort } from './processes.ts';

export interface PrivatePostgres {
  host: string;
  port: number;
  user: string;
  password: string;
  url: string;
  dir: string;
  binDir: string;
  stop(): Promise<void>;
}

export function postgresBinDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((name) => existsSync(path.join(root, name, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error('no PostgreSQL binaries under /usr/lib/postgresql/*/bin (initdb, pg_ctl)');
  return path.join(root, versions[0]!, 'bin');
}

function runAs(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
  return { uid, gid };
}

export async function startPrivatePostgres(settings: Record<string, string> = {}): Promise<PrivatePostgres> {
  const binDir = postgresBinDir();
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-private-pg-'));
  const owner = runAs();
  const password = `pw-${Math.random().toString(36).slice(2)}`;
  const passwordFile = path.join(dir, 'password');
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
  if (owner) {
    chownSync(dir, owner.uid, owner.gid);
    chownSync(passwordFile, owner.uid, owner.gid);
  }
  const run = (command: string, args: string[]) => {
    const result = spawnSync(path.join(binDir, command), args, { encoding: 'utf8', ...owner, cwd: dir });
    if (result.status !== 0) throw new Error(`${command} failed: ${result.stderr}${result.stdout}`);
  };
  const data = path.join(dir, 'data');
  run('initdb', [
    '-D',
    data,
    '-U',
    'postgres',
    '--auth-local=trust',
    '--auth-host=scram-sha-256',
    `--pwfile=${passwordFile}`,
    '-E',
    'UTF8',
    '--no-sync',
  ]);
  const port = await freePort();
  const options = {
    listen_addresses: '127.0.0.1',
    port: String(port),
    unix_socket_directories: dir,
    fsync: 'off',
    max_wal_senders: '10',
    max_replication_slots: '10',
    ...settings,
  };
  const flags = Object.entries(options)
    .map(([name, value]) => `-c ${name}=${value}`)
    .join(' ');
  run('pg_ctl', ['-D', data, '-o', flags, '-l', path.join(dir, 'log'), '-w', '-t', '60', 'start']);
  let stopped = false;
  return {
    host: '127.0.0.1',
    port,
    user: 'postgres',
    password,
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    dir,
    binDir,
    async stop() {
      if (stopped) return;
      stopped = true;
      spawnSync(path.join(binDir, 'pg_ctl'), ['-D', data, '-m', 'immediate', '-w', 'stop'], { ...owner, cwd: dir });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
