import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Type } from 'typebox';
import { problems } from '../../core/openapi.ts';
import { OutboundClient, outboundSettings } from '../../core/outbound.ts';
import {
  CustomConnector,
  CustomConnectorInput,
  CustomConnectorParams,
  EndpointParams,
  FlexConnector,
  ListCustomConnectorsQuery,
  TestEndpointRequest,
  TestEndpointResponse,
} from './schemas.ts';
import { FLEX_CONNECTORS } from './catalogue.ts';
import {
  createCustomConnector,
  deleteCustomConnector,
  listCustomConnectors,
  replaceCustomConnector,
  requireCustomConnector,
  requireLiveEndpoint,
} from './service.ts';
import { testEndpoint } from './endpoint-test.ts';

const tags = ['Connector profiles'];

/** A write with If-Match changes the profile only at the version its check saw (core/conditional.ts). */
const rowVersion = { table: 'customConnectors', idParam: 'customConnectorId' };

export async function connectorRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  const outbound = new OutboundClient(outboundSettings(app.config));

  app.get(
    '/flex-connectors',
    {
      schema: {
        summary: 'List the flex connector profiles',
        description:
          'The catalogue this server ships, keyed by alternateId; a publishing tool uploads each as part `connector-profile:flex-<alternateId>.json`.',
        tags,
        response: { 200: Type.Array(FlexConnector) },
      },
    },
    async () => FLEX_CONNECTORS,
  );

  app.get(
    '/custom-connectors',
    {
      schema: {
        summary: 'List the custom connector profiles of the account',
        description:
          'By name; deleted profiles only with `includeDeleted=true`. A publishing tool uploads each as part `connector-profile:custom-<id>.json`.',
        tags,
        querystring: ListCustomConnectorsQuery,
        response: { 200: Type.Array(CustomConnector) },
      },
    },
    async (request) => listCustomConnectors(app.store.db, request.principal.accountId, request.query.includeDeleted),
  );

  app.post(
    '/custom-connectors',
    {
      schema: {
        summary: 'Create a custom connector profile',
        tags,
        body: CustomConnectorInput,
        response: { 201: CustomConnector },
      },
    },
    async (request, reply) => {
      const { accountId } = request.principal;
      const connector = await app.store.db.transaction().execute(async (trx) => {
        const created = await createCustomConnector(trx, accountId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.customConnectorId = created.id;
        return created;
      });
      return sendCreated(request, reply, { segment: connector.id }, connector);
    },
  );

  app.get(
    '/custom-connectors/:customConnectorId',
    {
      schema: {
        summary: 'Get a custom connector profile (deleted ones too)',
        tags,
        params: CustomConnectorParams,
        response: { 200: CustomConnector },
      },
    },
    async (request) => requireCustomConnector(app.store.db, request.principal.accountId, request.params.customConnectorId),
  );

  app.put(
    '/custom-connectors/:customConnectorId',
    {
      config: { rowVersion },
      schema: {
        summary: 'Replace a custom connector profile',
        description: 'A deleted profile cannot be replaced (404).',
        tags,
        params: CustomConnectorParams,
        body: CustomConnectorInput,
        response: { 200: CustomConnector },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      return app.store.db
        .transaction()
        .execute((trx) => replaceCustomConnector(trx, accountId, request.params.customConnectorId, request.body));
    },
  );

  app.delete(
    '/custom-connectors/:customConnectorId',
    {
      config: { rowVersion },
      schema: {
        summary: 'Delete a custom connector profile',
        description: 'The profile is marked deleted with deletedTime and hidden from the list unless deleted ones are asked for.',
        tags,
        params: CustomConnectorParams,
        response: { 204: { type: 'null', description: 'The profile is deleted.' } },
      },
    },
    async (request, reply) => {
      await app.store.db
        .transaction()
        .execute((trx) => deleteCustomConnector(trx, request.principal.accountId, request.params.customConnectorId));
      return reply.code(204).send(null);
    },
  );

  app.post(
    '/custom-connectors/:customConnectorId/endpoints/:endpointId/test',
    {
      schema: {
        summary: "Send an endpoint's request once and answer what the external API answered",
        description:
          'Credentials in the body are used for this request only and never stored. Only destinations the deployment allows are reached ' +
          '(422 destination-not-allowed); an OAuth connection pending setup cannot be used (409 oauth-pending-setup); 502 when the API ' +
          'cannot be reached, 504 when it does not answer in time.',
        tags,
        params: EndpointParams,
        body: TestEndpointRequest,
        response: { 200: TestEndpointResponse, ...problems(409, 422, 502, 504) },
      },
    },
    async (request) => {
      const { customConnectorId, endpointId } = request.params;
      const endpoint = await requireLiveEndpoint(app.store.db, request.principal.accountId, customConnectorId, endpointId);
      return testEndpoint(app.store.db, outbound, request.principal.accountId, endpoint, request.body);
    },
  );
}
