import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Type } from 'typebox';
import { problems } from '../../core/openapi.ts';
import {
  CreateOAuthConnectionRequest,
  DeleteOAuthConnectionQuery,
  OAuthConnection,
  OAuthConnectionParams,
  SetUpOAuthConnectionRequest,
} from './schemas.ts';
import {
  createOAuthConnection,
  deleteOAuthConnection,
  listOAuthConnections,
  requireDeletionConfirmed,
  requireOAuthConnection,
  setUpOAuthConnection,
} from './service.ts';

const tags = ['OAuth connections'];

export async function oauthConnectionRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/oauth-connections',
    {
      schema: {
        summary: 'Create an OAuth connection of the account',
        description:
          'Without `tokens` the connection is pending setup: it can be attached to endpoints but not used to test them.',
        tags,
        body: CreateOAuthConnectionRequest,
        response: { 201: OAuthConnection, ...problems(409) },
      },
    },
    async (request, reply) => {
      const connection = await app.store.db.transaction().execute(async (trx) => {
        const created = await createOAuthConnection(trx, request.principal.accountId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.oauthConnectionId = created.id;
        return created;
      });
      return sendCreated(request, reply, { segment: connection.id }, connection);
    },
  );

  app.get(
    '/oauth-connections',
    {
      schema: {
        summary: 'List the OAuth connections of the account, oldest first',
        tags,
        response: { 200: Type.Array(OAuthConnection) },
      },
    },
    async (request) => listOAuthConnections(app.store.db, request.principal.accountId),
  );

  app.get(
    '/oauth-connections/:oauthConnectionId',
    { schema: { summary: 'Get an OAuth connection', tags, params: OAuthConnectionParams, response: { 200: OAuthConnection } } },
    async (request) => requireOAuthConnection(app.store.db, request.principal.accountId, request.params.oauthConnectionId),
  );

  app.post(
    '/oauth-connections/:oauthConnectionId/setup',
    {
      schema: {
        summary: 'Complete the setup of an OAuth connection',
        description: 'Records where the tokens obtained by authorizing are kept; the connection is AUTHORIZED from then on.',
        tags,
        params: OAuthConnectionParams,
        body: SetUpOAuthConnectionRequest,
        response: { 200: OAuthConnection },
      },
    },
    async (request) =>
      app.store.db
        .transaction()
        .execute((trx) =>
          setUpOAuthConnection(trx, request.principal.accountId, request.params.oauthConnectionId, request.body.tokens),
        ),
  );

  app.delete(
    '/oauth-connections/:oauthConnectionId',
    {
      // A write with If-Match deletes it only at the version its check saw (core/conditional.ts).
      config: { rowVersion: { table: 'oauthConnections', idParam: 'oauthConnectionId' } },
      schema: {
        summary: 'Delete an OAuth connection (needs confirm=true)',
        description:
          'Endpoints it is attached to can no longer be tested with it. Without `confirm=true` nothing is deleted and the answer is 400.',
        tags,
        params: OAuthConnectionParams,
        querystring: DeleteOAuthConnectionQuery,
        response: { 204: { type: 'null', description: 'The OAuth connection is deleted.' } },
      },
    },
    async (request, reply) => {
      const { oauthConnectionId } = request.params;
      requireDeletionConfirmed(request.query.confirm, request.url.split('?')[0]);
      await app.store.db
        .transaction()
        .execute((trx) => deleteOAuthConnection(trx, request.principal.accountId, oauthConnectionId));
      return reply.code(204).send(null);
    },
  );
}
