/**
 * The lineage area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export { recordStepLineage, jobNamespace, type LineageStep } from './service.ts';
