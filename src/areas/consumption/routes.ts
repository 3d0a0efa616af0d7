import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Consumption, ConsumptionQuery } from './schemas.ts';
import { consumption } from './service.ts';

/** The account's consumption: the work its runs did, per day, priced in credits (docs/api/consumption.md). */
export async function consumptionRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/consumption',
    {
      schema: {
        summary: 'Read consumption',
        description:
          "Finished runs (SUCCESS, FAILED, CANCELLED) per UTC day of their start, with their run-seconds and credits (run-hours priced by the rate of the run's agent type, DPC_CREDITS_PER_HOUR), optionally per project, environment, agent and pipeline. Derived from the executions: one count whatever instance recorded them.",
        tags: ['Consumption'],
        querystring: ConsumptionQuery,
        response: { 200: Consumption },
      },
    },
    async (request) =>
      consumption(app.store.db, app.store.dialect, request.principal.accountId, request.query, app.config.creditsPerHour),
  );
}
