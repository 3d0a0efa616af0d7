import type { FastifyInstance } from 'fastify';
import type { Config } from './core/config.ts';
import { migrate, openStore } from './core/db/database.ts';
import { buildApp } from './app.ts';

export interface RunningServer {
  app: FastifyInstance;
  url: string;
  close(): Promise<void>;
}

/** Opens the store, applies migrations, starts the job worker and listens. */
export async function startServer(config: Config, logger?: Parameters<typeof buildApp>[0]['logger']): Promise<RunningServer> {
  const store = openStore(config);
  try {
    await migrate(store);
    const app = await buildApp({ config, store, logger });
    store.onConnectionLost = (error) => app.log.warn({ err: error }, 'lost a PostgreSQL connection; the pool replaces it');
    const url = await app.listen({ host: config.host, port: config.port });
    if (config.runJobs) app.jobs.start();
    // The platform-hosted agents reach this instance over loopback when it listens on every address.
    const { port } = app.server.address() as { port: number };
    const wildcard = ['0.0.0.0', '::', ''].includes(config.host);
    app.hostedAgents.start(wildcard ? `http://127.0.0.1:${port}` : url);
    let closing: Promise<void> | undefined;
    const close = () =>
      (closing ??= (async () => {
        // Not ready from now on; wait for load balancers to notice, then stop taking requests and let
        // those in flight finish, then stop the worker, then the store.
        app.shuttingDown = true;
        if (config.shutdownDrainMs) await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
        // A stalled client cannot hold the shutdown up past the deadline.
        const deadline = setTimeout(() => {
          app.log.warn({ timeoutMs: config.shutdownTimeoutMs }, 'shutdown deadline passed: closing the connections still open');
          app.server.closeAllConnections();
        }, config.shutdownTimeoutMs);
        // The hosted agents first: their long polls would otherwise hold the close up.
        await app.hostedAgents.stop();
        await app.close();
        clearTimeout(deadline);
        await app.jobs.stop();
        await store.close();
      })());
    return { app, url, close };
  } catch (error) {
    await store.close();
    throw error;
  }
}
