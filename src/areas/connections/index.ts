/**
 * The connections area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { connectionSecret } from './service.ts';
