import { Type, type Static } from 'typebox';
import { VersionName } from '../artifacts/index.ts';

export const SharedPipelineIdPrefix = Type.String({
  minLength: 1,
  maxLength: 255,
  description: 'groups related shared pipelines',
  examples: ['acme-common'],
});

/** Pipeline files, as the project folder holds them; each becomes a shared pipeline. */
export const PIPELINE_FILE = /\.(orch|tran)\.ya?ml$/;

export const PublishSharedPipelinesHeaders = Type.Object({
  sharedPipelineIdPrefix: SharedPipelineIdPrefix,
  versionName: VersionName,
  commitHash: Type.Optional(Type.String({ maxLength: 255, examples: ['9fceb02d0ae598e95dc970b74767f19372d61af8'] })),
  branch: Type.Optional(Type.String({ maxLength: 255, examples: ['main'] })),
});

export const SetSharedPipelinesEnabledRequest = Type.Object(
  { enabled: Type.Boolean(), sharedPipelineIdPrefix: SharedPipelineIdPrefix, versionName: VersionName },
  { examples: [{ enabled: false, sharedPipelineIdPrefix: 'acme-common', versionName: '1.4.0' }] },
);
export type SetSharedPipelinesEnabledRequest = Static<typeof SetSharedPipelinesEnabledRequest>;

export const SharedPipelinesQuery = Type.Object({
  sharedPipelineIdPrefix: SharedPipelineIdPrefix,
  versionName: Type.Optional(
    Type.String({ minLength: 1, maxLength: 255, description: 'omitted: the most recently published version' }),
  ),
});

export const SharedPipelineArtifactDetails = Type.Object({
  branch: Type.Optional(Type.String()),
  commitHash: Type.Optional(Type.String()),
  createdAt: Type.String({ format: 'date-time', description: 'when the version was published' }),
  enabled: Type.Boolean(),
  provider: Type.String({ description: '"upload": published through this API' }),
  sharedPipelineIdPrefix: Type.String(),
  versionName: Type.String(),
});
export type SharedPipelineArtifactDetails = Static<typeof SharedPipelineArtifactDetails>;

export const SharedPipeline = Type.Object({
  description: Type.String({ description: 'the `description` of the pipeline file, or empty' }),
  sharedPipelineId: Type.String({ description: "<sharedPipelineIdPrefix>/<the file's path without .orch.yaml or .tran.yaml>" }),
  sourcePipeline: Type.String({ description: 'path of the uploaded pipeline file' }),
});

export const SharedPipelinesResult = Type.Object(
  { artifactDetails: SharedPipelineArtifactDetails, sharedPipelines: Type.Array(SharedPipeline) },
  {
    examples: [
      {
        artifactDetails: {
          branch: 'main',
          commitHash: '9fceb02d0ae598e95dc970b74767f19372d61af8',
          createdAt: '2026-11-22T09:30:00.000Z',
          enabled: true,
          provider: 'upload',
          sharedPipelineIdPrefix: 'acme-common',
          versionName: '1.4.0',
        },
        sharedPipelines: [
          {
            description: 'Loads a table incrementally',
            sharedPipelineId: 'acme-common/loaders/incremental',
            sourcePipeline: 'loaders/incremental.orch.yaml',
          },
        ],
      },
    ],
  },
);
