import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { Page, PageQuery } from '../../core/paging.ts';
import { runPeriodically } from '../../core/ticker.ts';
import {
  CreatedWebhook,
  CreateWebhookRequest,
  DeliveryParams,
  DeliveryQuery,
  SigningSecret,
  UpdateWebhookRequest,
  Webhook,
  WebhookDelivery,
  WebhookParams,
} from './schemas.ts';
import { WebhookService } from './service.ts';

const tags = ['Webhooks'];
const admin = { role: 'admin' as const };
/** A write with If-Match changes the webhook only at the version its check saw (core/conditional.ts). */
const rowVersion = { table: 'webhooks', idParam: 'webhookId' };
const HOUR_MS = 3_600_000;

/** Webhooks (admins only): CRUD, the signing secret, the delivery log and redelivery. See docs/webhooks.md. */
export async function webhookRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const service = new WebhookService(app);
  if (app.config.runJobs) service.start();
  runPeriodically(app, 'webhook delivery retention', HOUR_MS, () => service.prune());

  app.post(
    '/webhooks',
    {
      config: admin,
      schema: {
        summary: 'Create a webhook',
        description:
          "Events of the account (of the types and project given) that happen from now on are POSTed to the URL, signed with the answer's `signingSecret`, which is shown this once.",
        tags,
        body: CreateWebhookRequest,
        response: { 201: CreatedWebhook, ...problems(422) },
      },
    },
    async (request, reply) => {
      const created = await service.create(request.principal.accountId, request.principal.clientId, request.body, (id) => {
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.webhookId = id;
      });
      // It shows the signing secret this once: no cache keeps it.
      reply.header('cache-control', 'no-store');
      return sendCreated(request, reply, { segment: created.webhookId }, created);
    },
  );

  app.get(
    '/webhooks',
    {
      config: admin,
      schema: { summary: "List the account's webhooks", tags, querystring: PageQuery, response: { 200: Page(Webhook) } },
    },
    async (request) => service.list(request.principal.accountId, request.query),
  );

  app.get(
    '/webhooks/:webhookId',
    { config: admin, schema: { summary: 'Read a webhook', tags, params: WebhookParams, response: { 200: Webhook } } },
    async (request) => service.read(request.principal.accountId, request.params.webhookId),
  );

  app.patch(
    '/webhooks/:webhookId',
    {
      config: { ...admin, rowVersion },
      schema: {
        summary: 'Change a webhook, or enable or disable it',
        tags,
        params: WebhookParams,
        body: UpdateWebhookRequest,
        response: { 200: Webhook, ...problems(422) },
      },
    },
    async (request) => service.update(request.principal.accountId, request.params.webhookId, request.body),
  );

  app.delete(
    '/webhooks/:webhookId',
    {
      config: { ...admin, rowVersion },
      schema: { summary: 'Delete a webhook and its delivery log', tags, params: WebhookParams, response: noContent('Deleted.') },
    },
    async (request, reply) => {
      await service.delete(request.principal.accountId, request.params.webhookId);
      return reply.code(204).send();
    },
  );

  app.post(
    '/webhooks/:webhookId/signing-secret',
    {
      config: admin,
      schema: {
        summary: 'Replace the signing secret',
        description: 'The old secret stops signing at once; the new one is shown this once.',
        tags,
        params: WebhookParams,
        response: { 200: SigningSecret },
      },
    },
    async (request, reply) => {
      const signingSecret = await service.rotateSecret(request.principal.accountId, request.params.webhookId);
      return reply.header('cache-control', 'no-store').send({ signingSecret });
    },
  );

  app.get(
    '/webhooks/:webhookId/deliveries',
    {
      config: admin,
      schema: {
        summary: "List a webhook's deliveries, newest event first",
        tags,
        params: WebhookParams,
        querystring: DeliveryQuery,
        response: { 200: Page(WebhookDelivery) },
      },
    },
    async (request) => service.deliveries(request.principal.accountId, request.params.webhookId, request.query),
  );

  app.post(
    '/webhooks/:webhookId/deliveries/:deliveryId/redeliver',
    {
      config: admin,
      schema: {
        summary: 'Send a delivery again',
        description:
          'One more try of a delivery that succeeded or failed, with the same event id and body, soon. A pending one is 409; so is a delivery of a disabled webhook (enable it first).',
        tags,
        params: DeliveryParams,
        response: { 202: WebhookDelivery, ...problems(409) },
      },
    },
    async (request, reply) => {
      const { webhookId, deliveryId } = request.params;
      return reply.code(202).send(await service.redeliver(request.principal.accountId, webhookId, deliveryId));
    },
  );
}
