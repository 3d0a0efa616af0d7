import { connect } from 'node:net';
import { registerWorkHandler, WorkFailure } from './handlers.ts';

interface StreamingPayload {
  streamingPipelineId: string;
  streamingSource: { connection: { host: string; port: number } };
}

/** How often a running streaming pipeline's source is checked. */
const CHECK_INTERVAL_MS = 15_000;

/**
 * Runs a streaming pipeline until the server cancels the work (its stop). The reference agent has no
 * change-data-capture engine: it supervises the source (a TCP connection to its host and port, at start
 * and every 15 s) and reports RUNNING, or fails when the source cannot be reached. An agent with an
 * engine registers its own handler for this kind.
 */
registerWorkHandler('start-streaming-pipeline', async (work, { report, signal }) => {
  const { host, port } = (work.payload as StreamingPayload).streamingSource.connection;
  await reachable(host, port);
  await report({ status: 'RUNNING', message: `source ${host}:${port} reachable` });
  while (!signal.aborted) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, CHECK_INTERVAL_MS);
      signal.addEventListener('abort', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    if (!signal.aborted) await reachable(host, port);
  }
  return { status: 'STOPPED' };
});

function reachable(host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, timeout: 5000 });
    const fail = (reason: string) => {
      socket.destroy();
      reject(new WorkFailure(`the source ${host}:${port} cannot be reached: ${reason}`, 'source-unreachable'));
    };
    socket.once('connect', () => {
      socket.end();
      resolve();
    });
    socket.once('timeout', () => fail('timed out'));
    socket.once('error', (error) => fail(error.message));
  });
}
