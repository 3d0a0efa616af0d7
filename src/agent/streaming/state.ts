/**
 * A streaming pipeline's position in the agent's state folder (`streaming/<pipelineId>.json`): written to a
 * temporary file, fsync'd, renamed over the old one and the folder fsync'd, so that a crash leaves the old
 * position or the new one, never a torn file. Written only after the target holds everything up to it.
 */
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';

export interface StreamingState {
  /** The replication slot and publication the agent made at the source. */
  slot: string;
  publication: string;
  /** in-progress: the initial snapshot was started and not finished (a restart takes it again); done otherwise. */
  snapshot: 'in-progress' | 'done';
  /** The LSN the snapshot is consistent with (its files are named by it). */
  snapshotLsn: string;
  /** The end LSN of the last transaction written to the target: the stream resumes after it. */
  position: string;
  /** Rows written to the target since the first start, by `schema.table`. */
  rowsPerTable: Record<string, number>;
}

function fileOf(stateDir: string, pipelineId: string): string {
  if (!/^[0-9a-fA-F-]{1,64}$/.test(pipelineId)) throw new Error(`not a pipeline id: ${pipelineId}`);
  return path.join(stateDir, 'streaming', `${pipelineId}.json`);
}

export async function loadState(stateDir: string, pipelineId: string): Promise<StreamingState | undefined> {
  try {
    return JSON.parse(await readFile(fileOf(stateDir, pipelineId), 'utf8')) as StreamingState;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** Writes `bytes` to `file` durably: temporary file, fsync, rename, fsync of the folder. */
export async function writeDurably(file: string, bytes: string | Uint8Array, mode = 0o600): Promise<void> {
  const folder = path.dirname(file);
  await mkdir(folder, { recursive: true, mode: 0o700 });
  const temporary = `${file}.${process.pid}.tmp`;
  const handle = await open(temporary, 'w', mode);
  try {
    await handle.writeFile(bytes);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(temporary, file);
  const directory = await open(folder, 'r');
  try {
    await directory.sync();
  } finally {
    await directory.close();
  }
}

export async function saveState(stateDir: string, pipelineId: string, state: StreamingState): Promise<void> {
  await writeDurably(fileOf(stateDir, pipelineId), JSON.stringify(state));
}

export async function removeState(stateDir: string, pipelineId: string): Promise<void> {
  await rm(fileOf(stateDir, pipelineId), { force: true });
}
