import type { Executor } from '../../core/db/database.ts';
import { now } from '../../core/db/database.ts';
import { badRequest } from '../../core/problems.ts';
import { artifactFilePaths, artifactFileText, requireArtifact } from '../artifacts/index.ts';
import { requireEnvironment } from '../environments/index.ts';
import { variableValuesIn } from '../variables/index.ts';
import { PIPELINE_SUFFIXES } from '../../contract/pipeline-file.ts';
import { reviewFiles } from './rules.ts';
import { sqlGrammarOf } from '../../contract/sql-grammar.ts';
import { MAX_FINDINGS, type Review, type ReviewRequest } from './schemas.ts';

const isPipelineFile = (path: string) =>
  path.endsWith(PIPELINE_SUFFIXES.orchestration) || path.endsWith(PIPELINE_SUFFIXES.transformation);

/**
 * Reviews a version of the project's pipelines (a published one, or files sent with the request) as the
 * environment would run it: its project variables are known. Reads only; the caller has checked the project.
 */
export async function reviewPipelines(db: Executor, projectId: string, request: ReviewRequest): Promise<Review> {
  if (request.files !== undefined && request.versionName !== undefined) {
    throw badRequest('Review either a published version or uploaded files, not both.', [
      'body.files: must not be given with versionName',
    ]);
  }
  const environment = await requireEnvironment(db, projectId, request.environmentName);
  let versionName: string | undefined;
  // Prototype-less: paths are the user's.
  const files = Object.create(null) as Record<string, string>;
  if (request.files !== undefined) {
    for (const [path, text] of Object.entries(request.files)) if (isPipelineFile(path)) files[path] = text;
  } else {
    const artifact = await requireArtifact(db, environment.id, request.versionName);
    versionName = artifact.versionName;
    for (const path of (await artifactFilePaths(db, artifact.id)).filter(isPipelineFile)) {
      files[path] = await artifactFileText(db, artifact.id, path);
    }
  }
  const projectVariables = new Set((await variableValuesIn(db, projectId, environment.id)).map((variable) => variable.name));
  // SQL is checked in the grammar of the environment's warehouse.
  const findings = await reviewFiles(files, { projectVariables, sqlDialect: sqlGrammarOf(environment.warehouse?.type) });
  return {
    projectId,
    environmentName: environment.name,
    ...(versionName !== undefined && { versionName }),
    reviewedAt: now(),
    files: Object.keys(files).sort(),
    findings: findings.slice(0, MAX_FINDINGS),
    ...(findings.length > MAX_FINDINGS && { findingsLeftOut: findings.length - MAX_FINDINGS }),
    errors: findings.filter((f) => f.severity === 'ERROR').length,
    warnings: findings.filter((f) => f.severity === 'WARNING').length,
  };
}
