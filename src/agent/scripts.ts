/**
 * Runs a pipeline's python-script or bash-script component as a subprocess: the run's variables in its
 * environment (beside PATH and HOME, nothing else of the agent's: its credentials stay out), a timeout,
 * stdout and stderr captured together. A cancel or the timeout kills the process group. Only agents
 * started with scripts allowed hand this to the runner.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ScriptResult } from './pipeline-runner.ts';

const OUTPUT_CAP = 64 * 1024;

export async function runScript(
  language: 'python' | 'bash',
  script: string,
  variables: Record<string, string>,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<ScriptResult> {
  signal.throwIfAborted();
  const cwd = await mkdtemp(path.join(tmpdir(), 'dpc-script-'));
  try {
    const [command, args] = language === 'python' ? ['python3', ['-c', script]] : ['bash', ['-c', script]];
    const child = spawn(command, args, {
      cwd,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: cwd, LANG: process.env.LANG ?? 'C.UTF-8', ...variables },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    const take = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (output.length > OUTPUT_CAP) output = output.slice(-OUTPUT_CAP);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    let timedOut = false;
    const kill = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, timeoutMs);
    signal.addEventListener('abort', kill, { once: true });
    const exitCode = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code) => resolve(code));
    }).finally(() => {
      clearTimeout(timer);
      signal.removeEventListener('abort', kill);
    });
    return { exitCode, output: output.trimEnd(), timedOut };
  } finally {
    await rm(cwd, { recursive: true, force: true });
  }
}
