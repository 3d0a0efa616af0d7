import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dpc = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/dpc.js');

/** Runs the dpc command to completion. */
export function runDpc(args: string[], env: NodeJS.ProcessEnv) {
  const result = spawnSync(process.execPath, [dpc, ...args], { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** `dpc serve` in a child process, collecting what it logs. */
export async function spawnServe(
  env: NodeJS.ProcessEnv,
): Promise<{ child: ChildProcess; url: string; logs: () => string; exited: Promise<number | null> }> {
  const port = await freePort();
  const child = spawn(process.execPath, [dpc, 'serve'], {
    env: { ...process.env, ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 1200; i += 1) {
    if (child.exitCode !== null) throw new Error(`dpc serve exited: ${output}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) return { child, url, logs: () => output, exited };
    } catch {
      // not yet listening
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill();
  throw new Error(`dpc serve did not answer: ${output}`);
}

/** `dpc agent run` in a child process (the reference agent), collecting what it logs; resolves once it runs. */
export async function spawnAgent(
  args: { url: string; clientId: string; clientSecret: string; stateDir: string },
  env: NodeJS.ProcessEnv = {},
): Promise<{ child: ChildProcess; logs: () => string; exited: Promise<number | null> }> {
  const child = spawn(
    process.execPath,
    [
      dpc,
      'agent',
      'run',
      '--url',
      args.url,
      '--client-id',
      args.clientId,
      `--client-secret=${args.clientSecret}`,
      '--state-dir',
      args.stateDir,
    ],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  for (let i = 0; i < 1200; i += 1) {
    if (child.exitCode !== null) throw new Error(`dpc agent run exited: ${output}`);
    if (output.includes('"agent running"')) return { child, logs: () => output, exited };
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill();
  throw new Error(`dpc agent run did not start: ${output}`);
}
