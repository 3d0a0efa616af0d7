import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page, PageQuery } from '../../core/paging.ts';
import { problems } from '../../core/openapi.ts';
import { ProjectParams, writeInProject } from '../projects/index.ts';
import { Type } from 'typebox';
import { CreateEnvironmentRequest, Environment, EnvironmentName } from './schemas.ts';
import { createEnvironment, deleteEnvironment, listEnvironments } from './service.ts';

const EnvironmentParams = Type.Object({ projectId: ProjectParams.properties.projectId, environmentName: EnvironmentName });

const tags = ['Environments'];

export async function environmentRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/projects/:projectId/environments',
    {
      schema: {
        summary: 'Create an environment of a project',
        tags,
        params: ProjectParams,
        body: CreateEnvironmentRequest,
        response: { 201: Environment, ...problems(409) },
      },
    },
    async (request, reply) => {
      const { projectId } = request.params;
      const { accountId } = request.principal;
      const environment = await writeInProject(app.store.db, accountId, projectId, async (trx) => {
        const created = await createEnvironment(trx, accountId, projectId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.environmentName = created.name;
        return created;
      });
      return sendCreated(request, reply, { segment: environment.name }, environment);
    },
  );

  app.get(
    '/projects/:projectId/environments',
    {
      schema: {
        summary: 'List the environments of a project',
        tags,
        params: ProjectParams,
        querystring: PageQuery,
        response: { 200: Page(Environment) },
      },
    },
    async (request) => {
      return listEnvironments(app.store.db, request.principal.accountId, request.params.projectId, request.query);
    },
  );

  app.delete(
    '/projects/:projectId/environments/:environmentName',
    {
      schema: {
        summary: 'Delete an environment and everything set for it (overrides, artifacts)',
        tags,
        params: EnvironmentParams,
        response: { 204: { type: 'null', description: 'The environment is deleted.' } },
      },
    },
    async (request, reply) => {
      const { projectId, environmentName } = request.params;
      await writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        deleteEnvironment(trx, projectId, environmentName),
      );
      return reply.code(204).send(null);
    },
  );
}
