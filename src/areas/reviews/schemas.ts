import { Type, type Static } from 'typebox';
import { EnvironmentName } from '../environments/index.ts';
import { RULES, SEVERITIES } from './rules.ts';

/** Most files and bytes of uploaded files one review reads (the request body limit applies too). */
export const MAX_REVIEW_FILES = 1000;

const PipelinePath = Type.String({ minLength: 1, maxLength: 1024, pattern: '^[^\\u0000-\\u001f]+$' });

export const ReviewRequest = Type.Object(
  {
    environmentName: EnvironmentName,
    versionName: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 255,
        description: 'the published version to review; absent: the latest enabled version of the environment',
      }),
    ),
    files: Type.Optional(
      Type.Record(PipelinePath, Type.String({ maxLength: 1024 * 1024 }), {
        maxProperties: MAX_REVIEW_FILES,
        description:
          'files to review instead of a published version, by path (as `dpc publish` would upload them); the environment still gives the project variables',
      }),
    ),
  },
  {
    examples: [{ environmentName: 'production' }, { environmentName: 'production', versionName: '1.4.0' }],
  },
);
export type ReviewRequest = Static<typeof ReviewRequest>;

export const Finding = Type.Object({
  rule: Type.Enum(Object.keys(RULES) as (keyof typeof RULES)[], { description: 'the rule (docs/api/reviews.md lists them)' }),
  severity: Type.Enum(SEVERITIES),
  file: Type.String({ description: "the pipeline file's path" }),
  component: Type.Optional(Type.String()),
  parameter: Type.Optional(Type.String()),
  message: Type.String({ description: 'what is wrong; never the value of a credential it found' }),
});

/** Findings listed in a review's answer at most: aliases and many components can multiply them (18 MB answers). */
export const MAX_FINDINGS = 1000;

export const Review = Type.Object(
  {
    projectId: Type.String({ format: 'uuid' }),
    environmentName: Type.String(),
    versionName: Type.Optional(Type.String({ description: 'the version reviewed (absent when files were uploaded)' })),
    reviewedAt: Type.String({ format: 'date-time' }),
    files: Type.Array(Type.String(), { description: 'the pipeline files reviewed' }),
    findings: Type.Array(Finding, {
      description: `most severe first, then by file and component; the first ${MAX_FINDINGS} (errors and warnings count them all)`,
      maxItems: MAX_FINDINGS,
    }),
    findingsLeftOut: Type.Optional(
      Type.Integer({
        minimum: 1,
        description: `findings past the first ${MAX_FINDINGS}, not listed (counted in errors and warnings)`,
      }),
    ),
    errors: Type.Integer({ minimum: 0 }),
    warnings: Type.Integer({ minimum: 0 }),
  },
  {
    examples: [
      {
        projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
        environmentName: 'production',
        versionName: '1.4.0',
        reviewedAt: '2026-11-25T12:00:00.000Z',
        files: ['pipelines/load.orch.yaml'],
        findings: [
          {
            rule: 'unknown-variable',
            severity: 'ERROR',
            file: 'pipelines/load.orch.yaml',
            component: 'Load orders',
            parameter: 'sqlScript',
            message: '${regoin} is not a variable of the pipeline or the project',
          },
        ],
        errors: 1,
        warnings: 0,
      },
    ],
  },
);
export type Review = Static<typeof Review>;
