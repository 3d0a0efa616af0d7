/**
 * The oauth-connections area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { existingOAuthConnectionIds } from './repository.ts';
export { requireOAuthConnection } from './service.ts';
export { SecretReference } from './schemas.ts';
