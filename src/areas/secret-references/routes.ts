import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Page } from '../../core/paging.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { pageInProject, ProjectParams, writeInProject } from '../projects/index.ts';
import { CreateSecretReferenceRequest, SecretReference, SecretReferenceParams, SecretReferenceQuery } from './schemas.ts';
import { createSecretReference, deleteSecretReference, listSecretReferences } from './service.ts';

const tags = ['Secret References'];

export async function secretReferenceRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/projects/:projectId/secret-references/:secretReferenceName',
    {
      schema: {
        summary: 'Create a secret reference',
        tags,
        params: SecretReferenceParams,
        body: CreateSecretReferenceRequest,
        response: { 201: SecretReference, ...problems(409) },
      },
    },
    async (request, reply) => {
      const { projectId, secretReferenceName } = request.params;
      const reference = await writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        createSecretReference(trx, projectId, secretReferenceName, request.body),
      );
      return reply.code(201).send(reference);
    },
  );

  app.get(
    '/projects/:projectId/secret-references',
    {
      schema: {
        summary: 'List the secret references of one type, PASSWORD unless told',
        tags,
        params: ProjectParams,
        querystring: SecretReferenceQuery,
        response: { 200: Page(SecretReference) },
      },
    },
    async (request) => {
      return pageInProject(
        app.store.db,
        request.principal.accountId,
        request.params.projectId,
        request.query,
        listSecretReferences,
      );
    },
  );

  app.delete(
    '/projects/:projectId/secret-references/:secretReferenceName',
    {
      schema: {
        summary: 'Delete a secret reference',
        tags,
        params: SecretReferenceParams,
        response: noContent('The secret reference is deleted.'),
      },
    },
    async (request, reply) => {
      const { projectId, secretReferenceName } = request.params;
      await writeInProject(app.store.db, request.principal.accountId, projectId, (trx) =>
        deleteSecretReference(trx, projectId, secretReferenceName),
      );
      return reply.code(204).send(null);
    },
  );
}
