import type { Dialect, Executor } from '../../core/db/database.ts';
import { badRequest } from '../../core/problems.ts';
import { agentsById } from '../agents/index.ts';
import { usageByDay, type UsageRow } from '../executions/index.ts';
import { projectNamesById } from '../projects/index.ts';
import {
  MAX_DAYS,
  USAGE_GROUPS,
  type Consumption,
  type ConsumptionQuery,
  type ConsumptionRow,
  type UsageGroup,
} from './schemas.ts';

const DAY_MS = 86_400_000;

function dayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** The window asked for, in days: `to` defaults to today, `from` to 29 days before `to`. */
function windowOf(query: ConsumptionQuery, today = Date.now()): { from: string; to: string } {
  const to = query.to ?? dayOf(today);
  const from = query.from ?? dayOf(Date.parse(to) - 29 * DAY_MS);
  const days = (Date.parse(to) - Date.parse(from)) / DAY_MS + 1;
  // Query parameters are named bare (docs/errors.md); the one the client sent is blamed (`from` past today, `to` not given).
  if (days < 1) {
    throw badRequest(
      'The window is empty.',
      query.to === undefined ? ['from: must not be after today (the default of to)'] : ['to: must not be before from'],
    );
  }
  if (days > MAX_DAYS)
    throw badRequest(`The window is longer than ${MAX_DAYS} days.`, [`from: at most ${MAX_DAYS} days before to`]);
  return { from, to };
}

function groupsOf(query: ConsumptionQuery): UsageGroup[] {
  const asked = new Set((query.groupBy ?? '').split(',').filter(Boolean));
  // In a fixed order, whatever order they were asked in, so that results read alike.
  return USAGE_GROUPS.filter((group) => asked.has(group));
}

const round = (value: number) => Math.round(value * 1e6) / 1e6;

/** A sum of counts some of which may not be known (null): the known ones summed; null when none is. */
const addKnown = (sum: number | null, value: number | null) => (value === null ? sum : (sum ?? 0) + value);

/**
 * The account's consumption per day (and per project, environment, agent or pipeline as asked): finished
 * runs, their run-seconds and credits, each run priced by the rate of its agent's type.
 */
export async function consumption(
  db: Executor,
  dialect: Dialect,
  accountId: string,
  query: ConsumptionQuery,
  creditsPerHour: Readonly<Record<string, number>>,
): Promise<Consumption> {
  const { from, to } = windowOf(query);
  const groups = groupsOf(query);
  const usage = await usageByDay(db, dialect, accountId, from, to);
  const [projects, agents] = await Promise.all([
    projectNamesById(
      db,
      accountId,
      usage.map((row) => row.projectId),
    ),
    agentsById(
      db,
      accountId,
      usage.map((row) => row.agentId),
    ),
  ]);
  // A run is priced by its agent's type when it ran (deleting the agent or changing its type reprices nothing);
  // runs from before that was kept, by the agent's type now.
  const rateOf = (row: UsageRow) => {
    const type = row.agentType ?? agents.get(row.agentId)?.agentType;
    return (type !== undefined && Object.hasOwn(creditsPerHour, type) ? creditsPerHour[type] : creditsPerHour.default) ?? 0;
  };

  const rolled = new Map<string, ConsumptionRow>();
  for (const row of usage) {
    const key = JSON.stringify([row.day, ...groups.map((group) => keyOf(row, group))]);
    let result = rolled.get(key);
    if (!result) {
      result = {
        date: row.day,
        ...labelsOf(row, groups, projects, agents),
        runs: 0,
        failedRuns: 0,
        runSeconds: 0,
        credits: 0,
        rowsWritten: null,
      };
      rolled.set(key, result);
    }
    // A deleted agent's rows are labelled with the type its runs ran as (the first known of them).
    if (groups.includes('agent') && result.agentType === undefined && row.agentType !== null) result.agentType = row.agentType;
    result.runs += row.runs;
    result.failedRuns += row.failedRuns;
    result.runSeconds += row.runSeconds;
    result.credits += (row.runSeconds / 3600) * rateOf(row);
    result.rowsWritten = addKnown(result.rowsWritten, row.rowsWritten);
  }
  const results = [...rolled.values()]
    .map((result) => ({ ...result, runSeconds: round(result.runSeconds), credits: round(result.credits) }))
    .sort((a, b) => a.date.localeCompare(b.date) || JSON.stringify(a).localeCompare(JSON.stringify(b)));
  // The totals add up the rows as answered (each rounded to the microcredit), so that an invoice built from the
  // rows reconciles with them.
  const totals = { runs: 0, failedRuns: 0, runSeconds: 0, credits: 0, rowsWritten: null as number | null };
  for (const result of results) {
    totals.rowsWritten = addKnown(totals.rowsWritten, result.rowsWritten);
    totals.runs += result.runs;
    totals.failedRuns += result.failedRuns;
    totals.runSeconds += result.runSeconds;
    totals.credits += result.credits;
  }
  return {
    from,
    to,
    groupBy: groups,
    creditsPerHour: { ...creditsPerHour },
    results,
    totals: { ...totals, runSeconds: round(totals.runSeconds), credits: round(totals.credits) },
  };
}

function keyOf(row: UsageRow, group: UsageGroup): string {
  switch (group) {
    case 'project':
      return row.projectId;
    case 'environment':
      return `${row.projectId}/${row.environmentName}`;
    case 'agent':
      return row.agentId;
    case 'pipeline':
      return `${row.projectId}/${row.pipelineName}`;
  }
}

function labelsOf(
  row: UsageRow,
  groups: UsageGroup[],
  projects: Map<string, string>,
  agents: Map<string, { name: string; agentType: string }>,
): Partial<ConsumptionRow> {
  const labels: Partial<ConsumptionRow> = {};
  // An environment or pipeline is named within its project, so either brings its project along.
  if (groups.includes('project') || groups.includes('environment') || groups.includes('pipeline')) {
    labels.projectId = row.projectId;
    const name = projects.get(row.projectId);
    if (name !== undefined) labels.projectName = name;
  }
  if (groups.includes('environment')) labels.environmentName = row.environmentName;
  if (groups.includes('agent')) {
    labels.agentId = row.agentId;
    const agent = agents.get(row.agentId);
    if (agent) Object.assign(labels, { agentName: agent.name, agentType: agent.agentType });
  }
  if (groups.includes('pipeline')) labels.pipelineName = row.pipelineName;
  return labels;
}
