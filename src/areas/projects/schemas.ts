import { Type, type Static } from 'typebox';

/** The specification's project id pattern (lower-case UUID). */
export const PROJECT_ID_PATTERN = '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

export const ProjectId = Type.String({
  pattern: PROJECT_ID_PATTERN,
  description: 'project id (UUID)',
  examples: ['5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11'],
});

export const ProjectParams = Type.Object({ projectId: ProjectId });
export type ProjectParams = Static<typeof ProjectParams>;

export const CreateProjectRequest = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 255 }),
    description: Type.Optional(Type.String({ maxLength: 4000 })),
  },
  { examples: [{ name: 'Sales analytics', description: 'Pipelines of the sales team' }] },
);
export type CreateProjectRequest = Static<typeof CreateProjectRequest>;

export const CreateProjectResponse = Type.Object(
  { projectId: Type.String({ format: 'uuid' }) },
  { examples: [{ projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11' }] },
);

export const Project = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    name: Type.String(),
    description: Type.Optional(Type.String()),
    createdAt: Type.String({ format: 'date-time' }),
  },
  {
    examples: [
      {
        id: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
        name: 'Sales analytics',
        description: 'Pipelines of the sales team',
        createdAt: '2026-11-22T09:30:00.000Z',
      },
    ],
  },
);
export type Project = Static<typeof Project>;
