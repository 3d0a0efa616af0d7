/**
 * The environments area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { environmentIdsByName, environmentNamesById } from './repository.ts';
export { listEnvironments, requireEnvironment, requireEnvironmentId } from './service.ts';
export { EnvironmentName, type WarehouseSettings } from './schemas.ts';
