import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { sendCreated } from '../../core/created.ts';
import { noContent, problems } from '../../core/openapi.ts';
import { ProjectParams, requireProject, writeInProject } from '../projects/index.ts';
import { assertNoMigrationInProgress, removeHostedRepository } from './hosting.ts';
import { MigrationRunner, startMigration } from './migration.ts';
import {
  createGitCredential,
  deleteGitCredential,
  listGitCredentials,
  requireMigration,
  setExternalRepository,
  toMigrationResult,
  toProjectRepository,
} from './service.ts';
import { externalRepositoryOf, externalRepositoryVersion } from './repository.ts';
import {
  CreateGitCredentialRequest,
  GitCredential,
  GitCredentialParams,
  MigrationParams,
  MigrationResult,
  ProjectRepository,
  SetProjectRepositoryRequest,
  StartMigrationHeaders,
  StartMigrationRequest,
  StartMigrationResponse,
} from './schemas.ts';

const baseUrlOf = (request: FastifyRequest) => `${request.protocol}://${request.host}`;

export async function repositoryRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  new MigrationRunner(fastify).register();
  // A deleted project's hosted Git repository goes once its rows are gone.
  fastify.projectDeletion.afterCommit('repositories', (projectId) => removeHostedRepository(fastify.config, projectId));

  app.post(
    '/enterprise-oauth-connections',
    {
      config: { role: 'admin' },
      schema: {
        summary: 'Create an enterprise OAuth connection (credentials of a git provider) of the account',
        description: 'The token or client secret is stored encrypted and never answered back.',
        tags: ['Repositories'],
        body: CreateGitCredentialRequest,
        response: { 201: GitCredential, ...problems(409) },
      },
    },
    async (request, reply) => {
      const credential = await app.store.db.transaction().execute(async (trx) => {
        const created = await createGitCredential(trx, app.secretBox, request.principal.accountId, request.body);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.enterpriseOauthId = created.id;
        return created;
      });
      return sendCreated(request, reply, { segment: credential.id }, credential);
    },
  );

  app.get(
    '/enterprise-oauth-connections',
    {
      schema: {
        summary: 'List the enterprise OAuth connections of the account, oldest first (without secrets)',
        tags: ['Repositories'],
        response: { 200: Type.Array(GitCredential) },
      },
    },
    async (request) => listGitCredentials(app.store.db, request.principal.accountId),
  );

  app.delete(
    '/enterprise-oauth-connections/:connectionId',
    {
      config: { role: 'admin' },
      schema: {
        summary: 'Delete an enterprise OAuth connection',
        tags: ['Repositories'],
        params: GitCredentialParams,
        response: noContent('The connection is deleted.'),
      },
    },
    async (request, reply) => {
      await app.store.db
        .transaction()
        .execute((trx) => deleteGitCredential(trx, request.principal.accountId, request.params.connectionId));
      return reply.code(204).send(null);
    },
  );

  app.get(
    '/projects/:projectId/git-repository',
    {
      schema: {
        summary: "The project's Git repository: hosted by the server, or external",
        tags: ['Repositories'],
        params: ProjectParams,
        response: { 200: ProjectRepository },
      },
    },
    async (request) => {
      const { projectId } = request.params;
      await requireProject(app.store.db, request.principal.accountId, projectId);
      return toProjectRepository(baseUrlOf(request), projectId, await externalRepositoryOf(app.store.db, projectId));
    },
  );

  app.put(
    '/projects/:projectId/git-repository',
    {
      // A write with If-Match replaces the association only at the version its check saw, or creates it only
      // where its check saw none (core/conditional.ts).
      config: {
        role: 'admin',
        rowVersion: {
          table: 'projectRepositories',
          find: (db, request) => externalRepositoryVersion(db, (request.params as { projectId: string }).projectId),
        },
      },
      schema: {
        summary: 'Associate the project with an external repository (no data is copied; see repository-migration)',
        tags: ['Repositories'],
        params: ProjectParams,
        body: SetProjectRepositoryRequest,
        response: { 200: ProjectRepository, ...problems(409) },
      },
    },
    async (request) => {
      const { projectId } = request.params;
      const { accountId } = request.principal;
      return writeInProject(app.store.db, accountId, projectId, async (trx) => {
        await assertNoMigrationInProgress(trx, projectId);
        await setExternalRepository(trx, accountId, projectId, request.body);
        return toProjectRepository(baseUrlOf(request), projectId, await externalRepositoryOf(trx, projectId));
      });
    },
  );

  app.post(
    '/projects/:projectId/repository-migration',
    {
      config: { role: 'admin' },
      schema: {
        summary: "Start migrating the project's repository to another repository or provider",
        description:
          'Answers at once; the migration runs in the background (poll the migration status). MIRROR_PUSH needs an empty target; RECONFIGURE a target holding every branch.',
        tags: ['Repositories'],
        params: ProjectParams,
        headers: StartMigrationHeaders,
        body: StartMigrationRequest,
        response: { 202: StartMigrationResponse, ...problems(409) },
      },
    },
    async (request, reply) => {
      const { projectId } = request.params;
      const token = request.headers['git-provider-access-token'];
      const migrationId = await writeInProject(app.store.db, request.principal.accountId, projectId, async (trx) => {
        const id = await startMigration(fastify, trx, request.principal.accountId, projectId, request.body, token);
        // Named in the transaction, whose commit writes the write's outbox event.
        request.auditIds.migrationId = id;
        return id;
      });
      return reply.code(202).send({ migrationId });
    },
  );

  app.get(
    '/projects/:projectId/repository-migration/:migrationId',
    {
      config: { role: 'admin' },
      schema: {
        summary: 'The status of a repository migration; ask again while it is IN_PROGRESS or UNKNOWN',
        tags: ['Repositories'],
        params: MigrationParams,
        response: { 200: MigrationResult },
      },
    },
    async (request) => {
      const { projectId, migrationId } = request.params;
      await requireProject(app.store.db, request.principal.accountId, projectId);
      return toMigrationResult(await requireMigration(app.store.db, projectId, migrationId));
    },
  );
}
