/**
 * A MariaDB server of a test's own: mariadb-install-db and mariadbd from the installed packages, in a
 * temporary folder, on a free loopback port, with the settings the test asks for (the binary log in row
 * format for change data capture). A user `cdc` with a password and the replication privileges; root
 * without a password on the socket only. Run as the `mysql` user when the tests run as root.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import mysql from 'mysql2/promise';
import { freePort } from './processes.ts';

export interface PrivateMariadb {
  host: string;
  port: number;
  user: string;
  password: string;
  /** root over the server's socket: for the test's own statements. */
  root(): Promise<mysql.Connection>;
  stop(): Promise<void>;
}

function owner(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  return {
    uid: Number(execFileSync('id', ['-u', 'mysql'], { encoding: 'utf8' }).trim()),
    gid: Number(execFileSync('id', ['-g', 'mysql'], { encoding: 'utf8' }).trim()),
  };
}

export async function startPrivateMariadb(
  settings: string[] = ['--log-bin=binlog', '--binlog-format=ROW'],
): Promise<PrivateMariadb> {
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-private-mariadb-'));
  const user = owner();
  if (user) chownSync(dir, user.uid, user.gid);
  const data = path.join(dir, 'data');
  const install = spawnSync(
    'mariadb-install-db',
    [
      '--no-defaults',
      `--datadir=${data}`,
      '--auth-root-authentication-method=normal',
      '--skip-test-db',
      ...(user ? ['--user=mysql'] : []),
    ],
    { encoding: 'utf8', cwd: dir },
  );
  if (install.status !== 0) throw new Error(`mariadb-install-db failed: ${install.stderr}${install.stdout}`);
  const port = await freePort();
  const socket = path.join(dir, 'mariadb.sock');
  const child: ChildProcess = spawn(
    'mariadbd',
    [
      '--no-defaults',
      `--datadir=${data}`,
      `--port=${port}`,
      '--bind-address=127.0.0.1',
      `--socket=${socket}`,
      `--pid-file=${path.join(dir, 'mariadb.pid')}`,
      '--server-id=1',
      '--skip-name-resolve',
      '--innodb-buffer-pool-size=32M',
      '--innodb-flush-log-at-trx-commit=2',
      ...(user ? ['--user=mysql'] : []),
      ...settings,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], cwd: data },
  );
  let log = '';
  child.stderr!.on('data', (chunk) => (log += chunk));
  const root = () => mysql.createConnection({ socketPath: socket, user: 'root' });
  const password = `pw-${Math.random().toString(36).slice(2)}`;
  for (let attempt = 0; ; attempt += 1) {
    try {
      const client = await root();
      await client.query(`CREATE USER 'cdc'@'127.0.0.1' IDENTIFIED BY '${password}'`);
      await client.query(
        "GRANT SELECT, RELOAD, LOCK TABLES, REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR ON *.* TO 'cdc'@'127.0.0.1'",
      );
      await client.end();
      break;
    } catch (error) {
      if (child.exitCode !== null || attempt > 300) {
        child.kill('SIGKILL');
        rmSync(dir, { recursive: true, force: true });
        throw new Error(`mariadbd did not start: ${String(error)}\n${log}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  let stopped = false;
  return {
    host: '127.0.0.1',
    port,
    user: 'cdc',
    password,
    root,
    async stop() {
      if (stopped) return;
      stopped = true;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited.catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
