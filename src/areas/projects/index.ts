/**
 * The projects area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { accountOfProject, accountsOfProjects, projectNamesById, type ProjectListQueries } from './repository.ts';
export { pageInProject, projectList, requireProject, writeInProject } from './service.ts';
export { ProjectDeletion } from './deletion.ts';
export { PROJECT_ID_PATTERN, ProjectId, ProjectParams } from './schemas.ts';
