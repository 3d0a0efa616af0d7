import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sendCreated } from '../../core/created.ts';
import { Page, PageQuery } from '../../core/paging.ts';
import { problems } from '../../core/openapi.ts';
import { CreateProjectRequest, CreateProjectResponse, Project, ProjectParams } from './schemas.ts';
import { createProject, deleteProject, listProjects, requireProject } from './service.ts';

const tags = ['Projects'];

export async function projectRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/projects',
    {
      schema: {
        summary: 'Create a project',
        tags,
        body: CreateProjectRequest,
        response: { 201: CreateProjectResponse, ...problems(409) },
      },
    },
    async (request, reply) => {
      // Named in the transaction: the write's outbox event is written with its commit, and names the project.
      const projectId = await app.store.db.transaction().execute(async (trx) => {
        const id = await createProject(trx, request.principal.accountId, request.principal.clientId, request.body);
        request.auditIds.projectId = id;
        return id;
      });
      return sendCreated(request, reply, { segment: projectId }, { projectId });
    },
  );

  app.get(
    '/projects',
    { schema: { summary: 'List the projects of the account', tags, querystring: PageQuery, response: { 200: Page(Project) } } },
    async (request) => listProjects(app.store.db, request.principal.accountId, request.query),
  );

  app.get(
    '/projects/:projectId',
    { schema: { summary: 'Get a project', tags, params: ProjectParams, response: { 200: Project } } },
    async (request) => requireProject(app.store.db, request.principal.accountId, request.params.projectId),
  );

  app.delete(
    '/projects/:projectId',
    {
      // A write with If-Match deletes the project only at the version its check saw (core/conditional.ts).
      config: { role: 'admin', rowVersion: { table: 'projects', idParam: 'projectId' } },
      schema: {
        summary: 'Delete a project and everything attached to it',
        tags,
        params: ProjectParams,
        response: { 204: { type: 'null', description: 'The project is deleted.' } },
      },
    },
    async (request, reply) => {
      await app.store.db.transaction().execute(async (trx) => {
        await app.projectDeletion.runInTransaction(trx, app.store.dialect, request.principal.accountId, request.params.projectId);
        await deleteProject(trx, request.principal.accountId, request.params.projectId);
        await app.projectDeletion.runAfterRows(trx, app.store.dialect, request.principal.accountId, request.params.projectId);
      });
      // Its rows are gone with the commit; what other areas keep outside the store goes after them.
      await app.projectDeletion.runAfterCommit(request.params.projectId);
      return reply.code(204).send(null);
    },
  );
}
