/**
 * The projects area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export {
  accountOfProject,
  accountsOfProjects,
  pageInProject,
  projectNamesById,
  projectList,
  requireProject,
  writeInProject,
} from './repository.ts';
export { ProjectDeletion } from './deletion.ts';
export { PROJECT_ID_PATTERN, ProjectId, ProjectParams } from './schemas.ts';
