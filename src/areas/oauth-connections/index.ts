/**
 * The oauth-connections area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { existingOAuthConnectionIds, requireOAuthConnection } from './repository.ts';
export { SecretReference } from './schemas.ts';
