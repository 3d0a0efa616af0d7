/**
 * The secret-references area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { SECRET_REFERENCE_TYPES } from './schemas.ts';
