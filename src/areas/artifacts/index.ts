/**
 * The artifacts area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { artifactFilePaths, artifactFileText } from './repository.ts';
export { listPublishedPipelines, requireArtifact } from './service.ts';
export { EnabledResult, VersionName } from './schemas.ts';
export {
  UploadBody,
  UploadResult,
  acceptUploads,
  headerValue,
  uploadValidatorCompiler,
  withStagedUpload,
  type IgnoredResource,
  type PartRule,
  type StagedPart,
  type StagedUpload,
} from './upload.ts';
