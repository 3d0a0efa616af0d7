/**
 * The repositories area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { assertNoMigrationInProgress, ensureHostedRepository, hostedRepositoryPath } from './hosting.ts';
export { externalRepositoryOf } from './repository.ts';
