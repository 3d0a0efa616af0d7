/**
 * The reviews area's public face: the rules, and what of a review blocks a run (executions asks before a run starts).
 */
export { describeFinding, errorsBeforeRun, RULES, type Finding } from './rules.ts';
