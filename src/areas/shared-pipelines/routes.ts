import type { FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { problems } from '../../core/openapi.ts';
import {
  acceptUploads,
  EnabledResult,
  headerValue,
  UploadBody,
  UploadResult,
  uploadValidatorCompiler,
  withStagedUpload,
} from '../artifacts/index.ts';
import {
  PublishSharedPipelinesHeaders,
  SetSharedPipelinesEnabledRequest,
  SharedPipelinesQuery,
  SharedPipelinesResult,
} from './schemas.ts';
import {
  getSharedPipelines,
  pipelineFilesOnly,
  publishSharedPipelines,
  requireVersionFree,
  setSharedPipelinesEnabled,
} from './service.ts';

const tags = ['Shared pipeline artifacts'];

/** Shared pipeline artifacts belong to the caller's account, not to a project. */
export async function sharedPipelineRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  // The upload takes multipart bodies, in a scope of its own so that every other operation stays JSON-only.
  await app.register(async (scope) => {
    acceptUploads(scope);
    scope.withTypeProvider<TypeBoxTypeProvider>().post(
      '/shared-pipelines/artifacts',
      {
        validatorCompiler: uploadValidatorCompiler,
        schema: {
          summary: 'Publish a version of shared pipelines',
          description:
            'Multipart like an artifact upload. Each pipeline file (.orch.yaml, .tran.yaml) becomes a shared pipeline; other parts are listed in `ignoredResources`.',
          tags,
          consumes: ['multipart/form-data'],
          headers: PublishSharedPipelinesHeaders,
          body: UploadBody,
          response: { 200: UploadResult, ...problems(409, 503) },
        },
      },
      async (request) => {
        const { accountId } = request.principal;
        const sharedPipelineIdPrefix = headerValue(request, 'sharedPipelineIdPrefix')!;
        const versionName = headerValue(request, 'versionName')!;
        // Named before the transaction, whose commit writes the write's outbox event.
        Object.assign(request.auditIds, { sharedPipelineIdPrefix, versionName });
        await requireVersionFree(app.store.db, accountId, sharedPipelineIdPrefix, versionName);
        const ignoredResources = await withStagedUpload(request, app.config, pipelineFilesOnly, (upload) =>
          publishSharedPipelines(
            app.store.db,
            {
              accountId,
              sharedPipelineIdPrefix,
              versionName,
              branch: headerValue(request, 'branch'),
              commitHash: headerValue(request, 'commitHash'),
            },
            upload,
          ),
        );
        return { ignoredResources, versionName };
      },
    );
  });

  app.patch(
    '/shared-pipelines/artifacts',
    {
      schema: {
        summary: 'Enable or disable a version of shared pipelines',
        tags,
        body: SetSharedPipelinesEnabledRequest,
        response: { 200: EnabledResult },
      },
    },
    async (request) => {
      const { enabled, sharedPipelineIdPrefix, versionName } = request.body;
      Object.assign(request.auditIds, { sharedPipelineIdPrefix, versionName });
      await setSharedPipelinesEnabled(app.store.db, request.principal.accountId, sharedPipelineIdPrefix, versionName, enabled);
      return { enabled, versionName };
    },
  );

  app.get(
    '/shared-pipelines/artifacts/details',
    {
      schema: {
        summary: 'Get a version of shared pipelines, by default the most recently published',
        tags,
        querystring: SharedPipelinesQuery,
        response: { 200: SharedPipelinesResult },
      },
    },
    async (request) => {
      const { sharedPipelineIdPrefix, versionName } = request.query;
      return getSharedPipelines(app.store.db, request.principal.accountId, sharedPipelineIdPrefix, versionName);
    },
  );
}
