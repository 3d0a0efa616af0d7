export interface ScheduleTable {
  id: string;
  projectId: string;
  environmentId: string;
  name: string;
  pipelineName: string;
  cronExpression: string;
  timezone: string;
  enabled: number;
  /** The next due time; the instance that moves it on (compare and set) starts that run. */
  nextRunAt: string | null;
  createdAt: string;
  /** One more with every change through the API: what a write with If-Match compares (core/conditional.ts). */
  rowVersion?: number;
}

export interface ScheduleTables {
  schedules: ScheduleTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends ScheduleTables {}
}
