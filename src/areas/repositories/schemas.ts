import { Type, type Static } from 'typebox';
import { ProjectId } from '../projects/index.ts';

export const GitProvider = Type.Union([Type.Literal('github'), Type.Literal('gitlab'), Type.Literal('azure-devops')], {
  description: 'git provider',
});
export type GitProvider = Static<typeof GitProvider>;

export const CreateGitCredentialRequest = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 255 }),
    provider: GitProvider,
    type: Type.Union([Type.Literal('TOKEN'), Type.Literal('APP')], {
      description: 'TOKEN: an access token (used as the password over HTTPS); APP: an application client id and secret',
    }),
    token: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, writeOnly: true })),
    clientId: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
    clientSecret: Type.Optional(Type.String({ minLength: 1, maxLength: 4096, writeOnly: true })),
  },
  { examples: [{ name: 'gitlab service account', provider: 'gitlab', type: 'TOKEN', token: 'glpat-...' }] },
);
export type CreateGitCredentialRequest = Static<typeof CreateGitCredentialRequest>;

export const GitCredential = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    provider: GitProvider,
    type: Type.Union([Type.Literal('TOKEN'), Type.Literal('APP')]),
    clientId: Type.Optional(Type.String()),
    createdAt: Type.String({ format: 'date-time' }),
  },
  { description: 'an enterprise OAuth connection of the account for a git provider; its secret is never answered' },
);
export type GitCredential = Static<typeof GitCredential>;

export const GitCredentialParams = Type.Object({ connectionId: Type.String({ format: 'uuid' }) });

export const ProjectRepository = Type.Object({
  hosted: Type.Boolean({ description: 'whether the server hosts the repository (then cloneUrl is on this server)' }),
  cloneUrl: Type.String(),
  provider: Type.Optional(GitProvider),
  name: Type.Optional(Type.String()),
  enterpriseOauthId: Type.Optional(Type.String({ format: 'uuid' })),
});
export type ProjectRepository = Static<typeof ProjectRepository>;

export const SetProjectRepositoryRequest = Type.Object({
  cloneUrl: Type.String({ minLength: 1, maxLength: 2048 }),
  provider: GitProvider,
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
  enterpriseOauthId: Type.Optional(Type.String({ format: 'uuid' })),
});
export type SetProjectRepositoryRequest = Static<typeof SetProjectRepositoryRequest>;

export const StartMigrationRequest = Type.Object(
  {
    mode: Type.Union([Type.Literal('MIRROR_PUSH'), Type.Literal('RECONFIGURE')], {
      description: 'MIRROR_PUSH copies every branch and tag; RECONFIGURE only repoints the project',
    }),
    targetCloneUrl: Type.String({ minLength: 1, maxLength: 2048 }),
    targetProvider: GitProvider,
    targetName: Type.String({ minLength: 1, maxLength: 255 }),
    targetEnterpriseOauthId: Type.Optional(Type.String({ format: 'uuid' })),
    providerParameters: Type.Optional(Type.Record(Type.String(), Type.String())),
  },
  {
    examples: [
      {
        mode: 'MIRROR_PUSH',
        targetCloneUrl: 'https://gitlab.example.com/data/pipelines.git',
        targetProvider: 'gitlab',
        targetName: 'pipelines',
        providerParameters: { repositoryId: '42' },
      },
    ],
  },
);
export type StartMigrationRequest = Static<typeof StartMigrationRequest>;

export const StartMigrationHeaders = Type.Object({
  'git-provider-access-token': Type.Optional(
    Type.String({ minLength: 1, maxLength: 4096, description: 'required for a gitlab target; rotated at once, single use' }),
  ),
});

export const StartMigrationResponse = Type.Object({ migrationId: Type.String({ format: 'uuid' }) });

export const MigrationStatus = Type.Union(
  [Type.Literal('IN_PROGRESS'), Type.Literal('COMPLETED'), Type.Literal('FAILED'), Type.Literal('UNKNOWN')],
  { description: 'UNKNOWN: a transient state the server cannot name; ask again' },
);

export const MigrationResult = Type.Object({
  migrationId: Type.String({ format: 'uuid' }),
  status: MigrationStatus,
  detail: Type.Optional(Type.String()),
});
export type MigrationResult = Static<typeof MigrationResult>;

export const MigrationParams = Type.Object({ projectId: ProjectId, migrationId: Type.String({ format: 'uuid' }) });
