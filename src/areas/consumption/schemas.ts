import { Type, type Static } from 'typebox';

export const USAGE_GROUPS = ['project', 'environment', 'agent', 'pipeline'] as const;
export type UsageGroup = (typeof USAGE_GROUPS)[number];

/** Longest window one request reads. */
export const MAX_DAYS = 366;

const Day = Type.String({ format: 'date', description: 'a UTC day, YYYY-MM-DD' });

export const ConsumptionQuery = Type.Object({
  from: Type.Optional(Type.String({ format: 'date', description: `first day, inclusive (UTC); default: 29 days before \`to\`` })),
  to: Type.Optional(Type.String({ format: 'date', description: 'last day, inclusive (UTC); default: today' })),
  groupBy: Type.Optional(
    Type.String({
      pattern: `^(${USAGE_GROUPS.join('|')})(,(${USAGE_GROUPS.join('|')}))*$`,
      description: `besides the day, what each result is per: comma-separated, any of ${USAGE_GROUPS.join(', ')}; none: per day only`,
    }),
  ),
});
export type ConsumptionQuery = Static<typeof ConsumptionQuery>;

const Usage = {
  runs: Type.Integer({ minimum: 0, description: 'finished runs that did work (SUCCESS, FAILED or CANCELLED)' }),
  failedRuns: Type.Integer({ minimum: 0 }),
  runSeconds: Type.Number({ minimum: 0, description: "seconds from each run's start to its end, summed" }),
  credits: Type.Number({
    minimum: 0,
    description: "run-hours priced by the rate of each run's agent type (creditsPerHour), rounded to 6 places",
  }),
  rowsWritten: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()], {
    description:
      "rows the runs' steps wrote (INSERT, UPDATE, DELETE, MERGE and, on PostgreSQL, CREATE TABLE AS), summed over the steps whose agent knew the count; null: no step of these runs told (not known, not zero)",
  }),
};

export const ConsumptionRow = Type.Object({
  date: Day,
  projectId: Type.Optional(Type.String({ format: 'uuid' })),
  projectName: Type.Optional(Type.String({ description: 'absent when the project has been deleted since' })),
  environmentName: Type.Optional(Type.String()),
  agentId: Type.Optional(Type.String({ format: 'uuid' })),
  agentName: Type.Optional(Type.String({ description: 'absent when the agent has been deleted since' })),
  agentType: Type.Optional(Type.String({ description: 'absent when the agent has been deleted since (priced at `default`)' })),
  pipelineName: Type.Optional(Type.String()),
  ...Usage,
});
export type ConsumptionRow = Static<typeof ConsumptionRow>;

export const Consumption = Type.Object(
  {
    from: Day,
    to: Day,
    groupBy: Type.Array(Type.Enum(USAGE_GROUPS)),
    creditsPerHour: Type.Record(Type.String(), Type.Number(), {
      description: 'credits per run-hour by agent type; `default` prices agents of another type or deleted since',
    }),
    results: Type.Array(ConsumptionRow, { description: 'one per day (and group) with runs, oldest day first' }),
    totals: Type.Object(Usage),
  },
  {
    examples: [
      {
        from: '2026-11-01',
        to: '2026-11-30',
        groupBy: ['project'],
        creditsPerHour: { default: 1, CUSTOMER_HOSTED: 1, PLATFORM_HOSTED: 2, streaming: 1 },
        results: [
          {
            date: '2026-11-02',
            projectId: '5b1ae4bb-0e7f-4d4c-9a4e-0c9e2f5f2d11',
            projectName: 'warehouse',
            runs: 12,
            failedRuns: 1,
            runSeconds: 1800,
            credits: 0.5,
            rowsWritten: 120000,
          },
        ],
        totals: { runs: 12, failedRuns: 1, runSeconds: 1800, credits: 0.5, rowsWritten: 120000 },
      },
    ],
  },
);
export type Consumption = Static<typeof Consumption>;
