import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { Type } from 'typebox';
import { ProblemError } from '../../core/problems.ts';

/** Liveness and readiness: 200 once the store answers. */
export async function healthRoutes(app: FastifyInstance): Promise<void> {
  app.get('/healthz', { schema: { hide: true, response: { 200: Type.Object({ status: Type.String() }) } } }, async () => {
    try {
      await sql`select 1`.execute(app.store.db);
    } catch {
      throw new ProblemError(503, 'The store does not answer.');
    }
    return { status: 'ok' };
  });
}
