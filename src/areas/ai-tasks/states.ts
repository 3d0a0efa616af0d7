/**
 * The life of an AI agent task: every change of status goes through moveTask() in service.ts,
 * which applies this table and nothing else.
 *
 *   (create)  ──────────────▶ RUNNING
 *   RUNNING   ─ stop ───────▶ STOPPING   the user asked to stop; the step in progress finishes
 *   STOPPING  ─ stepEnded ──▶ STOPPED    the step in progress ended (at once when none was)
 *   RUNNING   ─ finished ───▶ STOPPED    the agent answered without asking for a tool: its work is done
 *   STOPPED   ─ followUp ───▶ RUNNING    the user sent another message: the agent carries on
 *   RUNNING   ─ failed ─────▶ ERRORED    a limit, no model, an unusable model answer, a step the server could not finish
 *   STOPPING  ─ failed ─────▶ ERRORED
 *
 * ERRORED is final. A task waiting for the user's answer to a permission request is RUNNING.
 */
export const TASK_STATUSES = ['RUNNING', 'STOPPING', 'STOPPED', 'ERRORED'] as const;
export type TaskStatus = (typeof TASK_STATUSES)[number];

export const TRANSITIONS = {
  stop: { from: ['RUNNING'], to: 'STOPPING' },
  stepEnded: { from: ['STOPPING'], to: 'STOPPED' },
  finished: { from: ['RUNNING'], to: 'STOPPED' },
  followUp: { from: ['STOPPED'], to: 'RUNNING' },
  failed: { from: ['RUNNING', 'STOPPING'], to: 'ERRORED' },
} as const satisfies Record<string, { from: readonly TaskStatus[]; to: TaskStatus }>;

export type TaskEvent = keyof typeof TRANSITIONS;

/** Why `event` cannot happen to a task in `status`, for the 409 a user sees. */
export function refusal(event: TaskEvent, status: TaskStatus): string {
  switch (event) {
    case 'stop':
      return `The task is ${status}, not RUNNING: only a running task can be stopped.`;
    case 'followUp':
      return `The task is ${status}: it takes messages while RUNNING or STOPPED.`;
    default:
      return `The task is ${status}; it cannot be moved by "${event}".`;
  }
}
