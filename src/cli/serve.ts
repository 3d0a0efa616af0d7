import { loadConfig } from '../core/config.ts';
import { startServer } from '../server.ts';
import type { Command } from './command.ts';

export const serveCommand: Command = {
  name: 'serve',
  summary: 'Start the server (what "npm start" runs). Migrations are applied first.',
  details: 'On SIGTERM or SIGINT /readyz turns 503, requests in flight finish, then the process exits 0.',
  async run() {
    const server = await startServer(loadConfig());
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
  },
};
