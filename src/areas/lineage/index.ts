/**
 * The lineage area's public face: what other areas may use. Nothing else of this folder is imported from outside it.
 */
export {
  recordRunEnd,
  recordRunStart,
  recordStepLineage,
  recordStreamingLineage,
  jobNamespace,
  type LineageStep,
  type StreamingLineage,
} from './service.ts';
