import { ProblemError } from '../../core/problems.ts';

/** The specification's pipeline execution states; test executions use the same ones. */
export const EXECUTION_STATUSES = [
  'RUNNING',
  'SUCCESS',
  'FAILED',
  'CANCELLING',
  'CANCELLED',
  'FORBIDDEN',
  'SKIPPED',
  'UNKNOWN',
] as const;
export type ExecutionStatus = (typeof EXECUTION_STATUSES)[number];

/** What moves a run: the README's state table names each. */
export type ExecutionEvent =
  | 'start' // a run is created and handed to an agent
  | 'decline' // a rule declines the run before it starts (a schedule's previous run still going)
  | 'agent-progress' // the agent reports a step
  | 'agent-done' // the agent reports the run succeeded
  | 'agent-failed' // the agent reports the run failed
  | 'agent-cancelled' // the agent reports it stopped the run, or the work was cancelled before delivery
  | 'agent-forbidden' // the agent reports it may not run this pipeline
  | 'cancel' // a user asks for a cancel
  | 'force-cancel' // a user asks for a cancel with forceUpdate
  | 'lost-contact'; // the agent has been out of contact past the window

/**
 * THE state table: for each state, each event it accepts and the state it leads to. Nothing else
 * moves a run; an event a state does not list is refused (see moveOf). (none) is a run not yet created.
 */
export const TRANSITIONS: Record<ExecutionStatus | '(none)', Partial<Record<ExecutionEvent, ExecutionStatus>>> = {
  '(none)': { start: 'RUNNING', decline: 'SKIPPED' },
  RUNNING: {
    'agent-progress': 'RUNNING',
    'agent-done': 'SUCCESS',
    'agent-failed': 'FAILED',
    'agent-cancelled': 'CANCELLED',
    'agent-forbidden': 'FORBIDDEN',
    cancel: 'CANCELLING',
    'force-cancel': 'CANCELLED',
    'lost-contact': 'UNKNOWN',
  },
  // The agent may finish the run before it sees the cancel: its outcome is kept as it happened.
  CANCELLING: {
    'agent-progress': 'CANCELLING',
    'agent-done': 'SUCCESS',
    'agent-failed': 'CANCELLED',
    'agent-cancelled': 'CANCELLED',
    'agent-forbidden': 'FORBIDDEN',
    cancel: 'CANCELLING',
    'force-cancel': 'CANCELLED',
    'lost-contact': 'UNKNOWN',
  },
  // A late report from the agent says what became of the run.
  UNKNOWN: {
    'agent-progress': 'RUNNING',
    'agent-done': 'SUCCESS',
    'agent-failed': 'FAILED',
    'agent-cancelled': 'CANCELLED',
    'agent-forbidden': 'FORBIDDEN',
    cancel: 'CANCELLING',
    'force-cancel': 'CANCELLED',
  },
  SUCCESS: {},
  FAILED: {},
  CANCELLED: {},
  FORBIDDEN: {},
  SKIPPED: {},
};

/** States a run never leaves. */
export function isFinal(status: ExecutionStatus): boolean {
  return Object.keys(TRANSITIONS[status]).length === 0;
}

/** A move the state table does not allow. */
export class IllegalTransition extends ProblemError {
  constructor(
    readonly from: ExecutionStatus | '(none)',
    readonly event: ExecutionEvent,
  ) {
    super(
      409,
      isFinal(from as ExecutionStatus)
        ? `The execution has finished (${from}); it cannot change any more.`
        : `An execution that is ${from} cannot take "${event}".`,
    );
  }
}

/** The state `event` leads to from `from`, or IllegalTransition. */
export function moveOf(from: ExecutionStatus | '(none)', event: ExecutionEvent): ExecutionStatus {
  const to = TRANSITIONS[from][event];
  if (to === undefined) throw new IllegalTransition(from, event);
  return to;
}
