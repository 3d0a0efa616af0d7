/**
 * The environments area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export {
  environmentIdsByName,
  environmentNamesById,
  listEnvironments,
  requireEnvironment,
  requireEnvironmentId,
} from './repository.ts';
export { EnvironmentName, type WarehouseSettings } from './schemas.ts';
