import { Type, type Static } from 'typebox';
import { PageQuery } from '../../core/paging.ts';
import { EnvironmentName } from '../environments/index.ts';

export const VersionName = Type.String({ minLength: 1, maxLength: 255, examples: ['2026.11.22-1'] });

/** Content type of a connector profile part, and the names such parts carry. */
export const CONNECTOR_PROFILE_CONTENT_TYPE = 'application/vnd.matillion.connector-profile+json';
export const CONNECTOR_PROFILE_PREFIX = 'connector-profile:';
export const CONNECTOR_PROFILE_NAME = /^connector-profile:(flex|custom)-[^/]+\.json$/;

/** Headers of an upload. Fastify matches header names case-insensitively; violations name them as written here. */
export const UploadArtifactHeaders = Type.Object({
  versionName: VersionName,
  environmentName: EnvironmentName,
  commitHash: Type.Optional(Type.String({ maxLength: 255, examples: ['9fceb02d0ae598e95dc970b74767f19372d61af8'] })),
  branch: Type.Optional(Type.String({ maxLength: 255, examples: ['main'] })),
});

const artifactDetailsExample = {
  branch: 'main',
  commitHash: '9fceb02d0ae598e95dc970b74767f19372d61af8',
  createdAt: '2026-11-22T09:30:00.000Z',
  deployedAt: '2026-11-22T09:30:00.000Z',
  enabled: true,
  provider: 'upload',
  versionName: '2026.11.22-1',
};

export const ArtifactDetails = Type.Object(
  {
    branch: Type.Optional(Type.String({ description: 'the branch the upload named, when it named one' })),
    commitHash: Type.Optional(Type.String({ description: 'the commit the upload named, when it named one' })),
    createdAt: Type.String({ format: 'date-time', description: 'when the version was uploaded (a promotion keeps it)' }),
    deployedAt: Type.String({
      format: 'date-time',
      description: 'when the version reached this environment: its upload or its promotion',
    }),
    enabled: Type.Boolean({ description: 'whether the version may be run; a disabled version stays listed' }),
    provider: Type.String({ description: 'how the version reached this environment: "upload" or "promotion"' }),
    versionName: Type.String(),
  },
  { examples: [artifactDetailsExample] },
);
export type ArtifactDetails = Static<typeof ArtifactDetails>;

export const ListArtifactsQuery = Type.Object({ environmentName: EnvironmentName, ...PageQuery.properties });

export const ArtifactQuery = Type.Object({
  environmentName: EnvironmentName,
  versionName: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 255,
      description: "the version; without it, the environment's latest enabled version",
    }),
  ),
});

export const PublishedPipelinesQuery = ListArtifactsQuery;

export const PublishedPipeline = Type.Object(
  {
    name: Type.String({ description: 'path of the pipeline file in the artifact' }),
    publishedTime: Type.String({
      format: 'date-time',
      description: 'when the version holding it was deployed to the environment',
    }),
  },
  { examples: [{ name: 'pipelines/load.orch.yaml', publishedTime: '2026-11-22T09:30:00.000Z' }] },
);

export const AssetQuery = Type.Object({
  environmentName: EnvironmentName,
  versionName: VersionName,
  path: Type.String({
    minLength: 1,
    description: 'the asset path, as listed in `assets`',
    examples: ['pipelines/load.orch.yaml'],
  }),
});

export const ArtifactDetailsResult = Type.Object(
  {
    assets: Type.Array(Type.String(), { description: 'asset paths, sorted' }),
    details: ArtifactDetails,
  },
  {
    examples: [
      {
        assets: ['connector-profile:flex-hubspot.json', 'pipelines/load.orch.yaml', 'sql/orders.sql'],
        details: artifactDetailsExample,
      },
    ],
  },
);

export const PromoteArtifactRequest = Type.Object(
  { sourceEnvironmentName: EnvironmentName, targetEnvironmentName: EnvironmentName, versionName: VersionName },
  { examples: [{ sourceEnvironmentName: 'test', targetEnvironmentName: 'production', versionName: '2026.11.22-1' }] },
);
export type PromoteArtifactRequest = Static<typeof PromoteArtifactRequest>;

export const PromoteArtifactResponse = Type.Object(
  { environmentName: Type.String(), versionName: Type.String() },
  { examples: [{ environmentName: 'production', versionName: '2026.11.22-1' }] },
);

export const SetArtifactEnabledRequest = Type.Object(
  { environmentName: EnvironmentName, versionName: VersionName, enabled: Type.Boolean() },
  { examples: [{ environmentName: 'production', versionName: '2026.11.22-1', enabled: false }] },
);
export type SetArtifactEnabledRequest = Static<typeof SetArtifactEnabledRequest>;

export const EnabledResult = Type.Object(
  { enabled: Type.Boolean(), versionName: Type.String() },
  { examples: [{ enabled: false, versionName: '2026.11.22-1' }] },
);
