/**
 * The variables area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { variableValuesIn } from './repository.ts';
export { listVariables, valueOfType } from './service.ts';
