import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { Type } from 'typebox';
import { ProblemError } from '../../core/problems.ts';
import { pendingMigrations } from '../../core/db/database.ts';

const Status = { schema: { hide: true, response: { 200: Type.Object({ status: Type.String() }) } } };

/**
 * /livez: the process is up (no store query). /readyz: the store answers, every migration is applied and
 * the process is not shutting down; a load balancer sends traffic only while it says 200. /healthz: the store answers.
 */
export async function healthRoutes(app: FastifyInstance): Promise<void> {
  const storeAnswers = async () => {
    try {
      await sql`select 1`.execute(app.store.db);
    } catch {
      throw new ProblemError(503, 'The store does not answer.');
    }
  };
  app.get('/livez', Status, async () => ({ status: 'ok' }));
  app.get('/healthz', Status, async () => {
    await storeAnswers();
    return { status: 'ok' };
  });
  app.get('/readyz', Status, async () => {
    if (app.shuttingDown) throw new ProblemError(503, 'The server is shutting down.');
    await storeAnswers();
    const pending = await pendingMigrations(app.store);
    if (pending.length) throw new ProblemError(503, `Migrations are not applied: ${pending.join(', ')}.`);
    return { status: 'ready' };
  });
}
