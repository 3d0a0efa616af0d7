import { Type, type Static } from 'typebox';
import { ProjectParams } from '../projects/index.ts';
import { EnvironmentName } from '../environments/index.ts';
import { PipelineName } from '../executions/index.ts';

export const ScheduleParams = Type.Object({ ...ProjectParams.properties, scheduleId: Type.String({ format: 'uuid' }) });

const Name = Type.String({ minLength: 1, maxLength: 255 });
const CronExpression = Type.String({
  minLength: 1,
  maxLength: 255,
  description: 'five fields (minute hour day-of-month month day-of-week), or six with seconds first',
  examples: ['0 2 * * *'],
});
const Timezone = Type.String({
  minLength: 1,
  maxLength: 64,
  description: 'IANA time zone the expression is read in',
  examples: ['Europe/London'],
});

export const CreateScheduleRequest = Type.Object(
  {
    name: Name,
    pipelineName: PipelineName,
    environmentName: EnvironmentName,
    cronExpression: CronExpression,
    timezone: Type.Optional({ ...Timezone, default: 'UTC' }),
    scheduleEnabled: Type.Optional(Type.Boolean({ default: true })),
  },
  {
    examples: [
      {
        name: 'nightly load',
        pipelineName: 'pipelines/daily-load.orch.yaml',
        environmentName: 'production',
        cronExpression: '0 2 * * *',
        timezone: 'Europe/London',
      },
    ],
  },
);
export type CreateScheduleRequest = Static<typeof CreateScheduleRequest>;

export const UpdateScheduleRequest = Type.Object(
  {
    name: Type.Optional(Name),
    pipelineName: Type.Optional(PipelineName),
    environmentName: Type.Optional(EnvironmentName),
    cronExpression: Type.Optional(CronExpression),
    timezone: Type.Optional(Timezone),
    scheduleEnabled: Type.Optional(Type.Boolean()),
  },
  { minProperties: 1, description: 'a field left out keeps its value', examples: [{ scheduleEnabled: false }] },
);
export type UpdateScheduleRequest = Static<typeof UpdateScheduleRequest>;

/** A list item, as INTERFACE.md gives it. */
export const ScheduleSummary = Type.Object({
  scheduleId: Type.String({ format: 'uuid' }),
  name: Type.String(),
  pipelineName: Type.String(),
  cronExpression: Type.String(),
  scheduleEnabled: Type.Boolean(),
  environmentName: Type.String(),
});
export type ScheduleSummary = Static<typeof ScheduleSummary>;

export const Schedule = Type.Object({
  ...ScheduleSummary.properties,
  timezone: Type.String(),
  nextRunAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
    description: 'the next due time; null while disabled',
  }),
  createdAt: Type.String({ format: 'date-time' }),
});
export type Schedule = Static<typeof Schedule>;
