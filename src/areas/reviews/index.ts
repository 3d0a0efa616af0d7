/**
 * The reviews area's public face: nothing of it is used by other areas (its routes are registered by the app).
 */
export { RULES, type Finding } from './rules.ts';
