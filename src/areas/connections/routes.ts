import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { VersionedRow } from '../../core/conditional.ts';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page } from '../../core/paging.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { pageInProject, ProjectParams, writeInProject } from '../projects/index.ts';
import {
  ConnectionListQuery,
  ConnectionNameQuery,
  ConnectionOverride,
  ConnectionOverrideKey,
  ConnectionOverrideListQuery,
  CreateConnectionOverrideRequest,
  CreateConnectionRequest,
  ProjectConnection,
  UpdateConnectionOverrideRequest,
  UpdateConnectionRequest,
} from './schemas.ts';
import {
  createConnection,
  createConnectionOverride,
  deleteConnection,
  deleteConnectionOverride,
  listConnectionOverrides,
  listConnections,
  connectionVersion,
  overrideVersion,
  replaceConnection,
  replaceConnectionOverride,
} from './service.ts';

const tags = ['Project Connections'];
const CONNECTIONS = '/projects/:projectId/connections';
const OVERRIDES = `${CONNECTIONS}/environment-overrides`;

type Addressed = FastifyRequest<{ Params: { projectId: string }; Querystring: Record<string, string> }>;

/**
 * A write with If-Match changes the connection (named by the query) only at the version its check saw
 * (core/conditional.ts). The GET of the same URL is the project's list (its first page), whose ETag is what
 * If-Match names; the version is of the one row the write changes.
 */
const connectionRow: VersionedRow = {
  table: 'connections',
  find: (db, request) =>
    connectionVersion(db, (request as Addressed).params.projectId, (request as Addressed).query.connectionName),
};

/** The same for an override: the row of the connection and environment the query names. */
const overrideRow: VersionedRow = {
  table: 'connectionOverrides',
  find: (db, request) => {
    const { params, query } = request as Addressed;
    return overrideVersion(db, params.projectId, {
      connectionName: query.connectionName,
      environmentName: query.environmentName,
    });
  },
};

export async function connectionRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    CONNECTIONS,
    {
      schema: {
        summary: 'Create a project connection',
        tags,
        params: ProjectParams,
        body: CreateConnectionRequest,
        response: { 201: ProjectConnection, ...problems(409, 422) },
      },
    },
    async (request, reply) => {
      const { accountId, clientId } = request.principal;
      const connection = await writeInProject(app.store.db, accountId, request.params.projectId, async (trx) => {
        const created = await createConnection(trx, request.params.projectId, clientId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.connectionName = created.name;
        return created;
      });
      return sendCreated(request, reply, { query: { connectionName: connection.name } }, connection);
    },
  );

  app.get(
    CONNECTIONS,
    {
      schema: {
        summary: 'List the project connections, by name',
        tags,
        params: ProjectParams,
        querystring: ConnectionListQuery,
        response: { 200: Page(ProjectConnection) },
      },
    },
    async (request) => {
      return pageInProject(app.store.db, request.principal.accountId, request.params.projectId, request.query, listConnections);
    },
  );

  app.put(
    CONNECTIONS,
    {
      config: { rowVersion: connectionRow },
      schema: {
        summary: 'Replace a project connection; a field left out is unset',
        tags,
        params: ProjectParams,
        querystring: ConnectionNameQuery,
        body: UpdateConnectionRequest,
        response: { 200: ProjectConnection, ...problems(422) },
      },
    },
    async (request) => {
      const { connectionName } = request.query;
      request.auditIds.connectionName = connectionName;
      return writeInProject(app.store.db, request.principal.accountId, request.params.projectId, (trx) =>
        replaceConnection(trx, request.params.projectId, connectionName, request.body),
      );
    },
  );

  app.delete(
    CONNECTIONS,
    {
      config: { rowVersion: connectionRow },
      schema: {
        summary: 'Delete a project connection and its environment overrides',
        tags,
        params: ProjectParams,
        querystring: ConnectionNameQuery,
        response: noContent('The connection is deleted.'),
      },
    },
    async (request, reply) => {
      const { connectionName } = request.query;
      request.auditIds.connectionName = connectionName;
      await writeInProject(app.store.db, request.principal.accountId, request.params.projectId, (trx) =>
        deleteConnection(trx, request.params.projectId, connectionName),
      );
      return reply.code(204).send(null);
    },
  );

  app.post(
    OVERRIDES,
    {
      schema: {
        summary: 'Create the override of a connection in one environment',
        tags,
        params: ProjectParams,
        body: CreateConnectionOverrideRequest,
        response: { 201: ConnectionOverride, ...problems(409, 422) },
      },
    },
    async (request, reply) => {
      const { connectionName, environmentName } = request.body;
      Object.assign(request.auditIds, { connectionName, environmentName });
      const override = await writeInProject(app.store.db, request.principal.accountId, request.params.projectId, (trx) =>
        createConnectionOverride(trx, request.params.projectId, request.body),
      );
      return sendCreated(request, reply, { query: { connectionName, environmentName } }, override);
    },
  );

  app.get(
    OVERRIDES,
    {
      schema: {
        summary: 'List connection overrides, by connection and environment name',
        tags,
        params: ProjectParams,
        querystring: ConnectionOverrideListQuery,
        response: { 200: Page(ConnectionOverride) },
      },
    },
    async (request) => {
      return pageInProject(
        app.store.db,
        request.principal.accountId,
        request.params.projectId,
        request.query,
        listConnectionOverrides,
      );
    },
  );

  app.put(
    OVERRIDES,
    {
      config: { rowVersion: overrideRow },
      schema: {
        summary: 'Replace the override of a connection in one environment',
        tags,
        params: ProjectParams,
        querystring: ConnectionOverrideKey,
        body: UpdateConnectionOverrideRequest,
        response: { 200: ConnectionOverride, ...problems(422) },
      },
    },
    async (request) => {
      Object.assign(request.auditIds, request.query);
      return writeInProject(app.store.db, request.principal.accountId, request.params.projectId, (trx) =>
        replaceConnectionOverride(trx, request.params.projectId, request.query, request.body.connectionDetails),
      );
    },
  );

  app.delete(
    OVERRIDES,
    {
      config: { rowVersion: overrideRow },
      schema: {
        summary: 'Delete the override of a connection in one environment',
        tags,
        params: ProjectParams,
        querystring: ConnectionOverrideKey,
        response: noContent('The override is deleted.'),
      },
    },
    async (request, reply) => {
      Object.assign(request.auditIds, request.query);
      await writeInProject(app.store.db, request.principal.accountId, request.params.projectId, (trx) =>
        deleteConnectionOverride(trx, request.params.projectId, request.query),
      );
      return reply.code(204).send(null);
    },
  );
}
