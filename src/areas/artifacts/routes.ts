import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { Executor } from '../../core/db/database.ts';
import { Page, pageOf, type PageQuery } from '../../core/paging.ts';
import { problems } from '../../core/openapi.ts';
import { ProjectParams } from '../projects/index.ts';
import {
  ArtifactDetails,
  ArtifactDetailsResult,
  ArtifactQuery,
  AssetQuery,
  CONNECTOR_PROFILE_CONTENT_TYPE,
  CONNECTOR_PROFILE_PREFIX,
  EnabledResult,
  ListArtifactsQuery,
  PromoteArtifactRequest,
  PromoteArtifactResponse,
  PublishedPipeline,
  PublishedPipelinesQuery,
  SetArtifactEnabledRequest,
  UploadArtifactHeaders,
} from './schemas.ts';
import {
  connectorProfileRule,
  getArtifact,
  getAssetContent,
  listArtifacts,
  listPublishedPipelines,
  artifactVersion,
  PROFILE_NAMES,
  promoteArtifact,
  publishArtifact,
  requireEnvironment,
  requireVersionFree,
  setArtifactEnabled,
} from './service.ts';
import {
  acceptUploads,
  stagingDirOf,
  sweepStaging,
  decodeEnvironmentNameHeader,
  headerValue,
  UploadBody,
  UploadResult,
  uploadValidatorCompiler,
  withStagedUpload,
} from './upload.ts';

const tags = ['Artifacts'];

/** A page of what `list` finds in environment `environmentName` of the caller's project. */
async function pageInEnvironment<T>(
  db: Executor,
  accountId: string,
  projectId: string,
  { environmentName, page, size }: { environmentName: string } & PageQuery,
  list: (db: Executor, environmentId: string, query: PageQuery) => Promise<{ results: T[]; total: number }>,
) {
  const environmentId = await requireEnvironment(db, accountId, projectId, environmentName);
  const { results, total } = await list(db, environmentId, { page, size });
  return pageOf({ page, size }, results, total);
}

export async function artifactRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  // Uploads left staged by a process that ended are removed before this one serves.
  fastify.addHook('onReady', async () => {
    const stagingDir = stagingDirOf(fastify.config);
    const swept = await sweepStaging(stagingDir);
    if (swept > 0) fastify.log.warn({ swept, stagingDir }, 'removed uploads left staged by a process that ended');
  });

  // The upload takes multipart bodies, in a scope of its own so that every other operation stays JSON-only.
  await app.register(async (scope) => {
    acceptUploads(scope);
    scope.withTypeProvider<TypeBoxTypeProvider>().post(
      '/projects/:projectId/artifacts',
      {
        validatorCompiler: uploadValidatorCompiler,
        preValidation: decodeEnvironmentNameHeader,
        schema: {
          summary: 'Upload an artifact: every file of the project as one version',
          description:
            'Each part is one file, named by its relative path, text/plain. Parts that are not UTF-8 text, have an unsafe path or repeat a path are listed in `ignoredResources`. ' +
            `Connector profiles are parts named ${PROFILE_NAMES} with content type ${CONNECTOR_PROFILE_CONTENT_TYPE}.`,
          tags,
          consumes: ['multipart/form-data'],
          params: ProjectParams,
          headers: UploadArtifactHeaders,
          body: UploadBody,
          response: { 200: UploadResult, ...problems(409, 503) },
        },
      },
      async (request) => {
        const { accountId } = request.principal;
        const { projectId } = request.params;
        const versionName = headerValue(request, 'versionName')!;
        const environmentName = headerValue(request, 'environmentName')!;
        // Named before the transaction, whose commit writes the write's outbox event.
        Object.assign(request.auditIds, { environmentName, versionName });
        // Refused before the body is read, and checked again where it is committed.
        const environmentId = await requireEnvironment(app.store.db, accountId, projectId, environmentName);
        await requireVersionFree(app.store.db, environmentId, versionName);
        const ignoredResources = await withStagedUpload(request, app.config, connectorProfileRule, (upload) =>
          app.store.db.transaction().execute((trx) =>
            publishArtifact(
              trx,
              {
                accountId,
                projectId,
                environmentName,
                versionName,
                branch: headerValue(request, 'branch'),
                commitHash: headerValue(request, 'commitHash'),
              },
              upload,
            ),
          ),
        );
        return { ignoredResources, versionName };
      },
    );
  });

  app.get(
    '/projects/:projectId/artifacts',
    {
      schema: {
        summary: 'List the artifacts of an environment, the most recently deployed first',
        tags,
        params: ProjectParams,
        querystring: ListArtifactsQuery,
        response: { 200: Page(ArtifactDetails) },
      },
    },
    async (request) =>
      pageInEnvironment(app.store.db, request.principal.accountId, request.params.projectId, request.query, listArtifacts),
  );

  app.get(
    '/projects/:projectId/artifacts/details',
    {
      schema: {
        summary: 'Get one version of an environment (the latest enabled one without versionName): its asset paths and details',
        tags,
        params: ProjectParams,
        querystring: ArtifactQuery,
        response: { 200: ArtifactDetailsResult },
      },
    },
    async (request) => {
      const { environmentName, versionName } = request.query;
      const environmentId = await requireEnvironment(
        app.store.db,
        request.principal.accountId,
        request.params.projectId,
        environmentName,
      );
      return getArtifact(app.store.db, environmentId, versionName);
    },
  );

  app.get(
    '/projects/:projectId/published-pipelines',
    {
      schema: {
        summary: "List the pipelines of an environment's latest enabled version",
        tags,
        params: ProjectParams,
        querystring: PublishedPipelinesQuery,
        response: { 200: Page(PublishedPipeline) },
      },
    },
    async (request) =>
      pageInEnvironment(
        app.store.db,
        request.principal.accountId,
        request.params.projectId,
        request.query,
        listPublishedPipelines,
      ),
  );

  app.get(
    '/projects/:projectId/artifacts/assets',
    {
      schema: {
        summary: 'Read one asset of a version back, as it was uploaded',
        tags,
        params: ProjectParams,
        querystring: AssetQuery,
        response: {
          200: {
            description: 'The asset content: text/plain, or the connector profile type for a connector profile.',
            content: {
              'text/plain': { schema: Type.String() },
              [CONNECTOR_PROFILE_CONTENT_TYPE]: { schema: Type.String() },
            },
          },
        },
      },
    },
    async (request, reply) => {
      const { environmentName, versionName, path } = request.query;
      const environmentId = await requireEnvironment(
        app.store.db,
        request.principal.accountId,
        request.params.projectId,
        environmentName,
      );
      const content = await getAssetContent(app.store.db, environmentId, versionName, path);
      const type = path.startsWith(CONNECTOR_PROFILE_PREFIX) ? CONNECTOR_PROFILE_CONTENT_TYPE : 'text/plain; charset=utf-8';
      // Stored contents are checked UTF-8, so the text is exactly the uploaded bytes.
      return reply.type(type).send(content.toString('utf8'));
    },
  );

  app.post(
    '/projects/:projectId/artifacts/promotions',
    {
      schema: {
        summary: 'Promote a version from one environment to another',
        description:
          'Copies the version, assets and all, into the target environment. A version is promoted to an environment once: a repeat is 409.',
        tags,
        params: ProjectParams,
        body: PromoteArtifactRequest,
        response: { 200: PromoteArtifactResponse, ...problems(409) },
      },
    },
    async (request) => {
      const { accountId } = request.principal;
      const { projectId } = request.params;
      const { targetEnvironmentName, versionName } = request.body;
      // Named before the transaction, whose commit writes the write's outbox event.
      Object.assign(request.auditIds, { environmentName: targetEnvironmentName, versionName });
      await app.store.db.transaction().execute((trx) => promoteArtifact(trx, accountId, projectId, request.body));
      return { environmentName: targetEnvironmentName, versionName };
    },
  );

  app.patch(
    '/projects/:projectId/artifacts',
    {
      // A write with If-Match changes the version (named by the body) only at the version of its row that its
      // check saw (core/conditional.ts). The ETag If-Match names is that of a GET of the same URL: a list page
      // of the environment the URL's query names (environmentName), as the GET takes it.
      config: {
        rowVersion: {
          table: 'artifacts',
          find: (db, request) => {
            const { params, body } = request as FastifyRequest<{ Params: ProjectParams; Body: SetArtifactEnabledRequest }>;
            return artifactVersion(db, params.projectId, body.environmentName, body.versionName);
          },
        },
      },
      schema: {
        summary: 'Enable or disable a version of an environment',
        description: 'A disabled version stays listed but is not to be run.',
        tags,
        params: ProjectParams,
        body: SetArtifactEnabledRequest,
        response: { 200: EnabledResult },
      },
    },
    async (request) => {
      const { environmentName, versionName, enabled } = request.body;
      Object.assign(request.auditIds, { environmentName, versionName });
      await app.store.db
        .transaction()
        .execute((trx) => setArtifactEnabled(trx, request.principal.accountId, request.params.projectId, request.body));
      return { enabled, versionName };
    },
  );
}
