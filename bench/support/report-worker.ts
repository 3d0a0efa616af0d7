/**
 * A process applying agents' reports to runs as the server does (applyAgentReport, each report in its own
 * transaction), for bench/events.ts: started twice, once as it is and once with emit() doing nothing
 * (--import ./bench/support/without-outbox.mjs), so that the two differ only by the outbox. Driven over IPC:
 * `{ steps }` applies one set of reports and answers `{ micros, cpuMicros }` per report.
 *
 * Environment: BENCH_DATA_DIR (SQLite), or BENCH_DATABASE_URL (PostgreSQL).
 */
import { loadConfig } from '../../src/core/config.ts';
import { migrate, openStore } from '../../src/core/db/database.ts';
import { createAccount } from '../../src/core/auth/accounts.ts';
import { applyReport, seedProject, seedRuns } from './runs.ts';

/** Runs reported at once, as reports of several agents arrive. */
const RUNS_AT_ONCE = 8;

const store = openStore({
  ...loadConfig({}),
  dataDir: process.env.BENCH_DATA_DIR ?? '',
  databaseUrl: process.env.BENCH_DATABASE_URL,
  rememberReads: false,
});
await migrate(store);
const { accountId } = await createAccount(store.db, 'bench');
const { projectId, environmentId } = await seedProject(store, accountId);

const apply = (workId: string, report: { type: 'progress' | 'done'; body: unknown }) =>
  applyReport(store, accountId, workId, report);

/**
 * RUNS_AT_ONCE fresh runs, reported through as an agent runs a pipeline of `steps` steps: each step RUNNING
 * then SUCCESS, then the run done. Every report changes a run's state (a step's or the run's), and each has its
 * event: step-started, step-finished, finished.
 */
async function reportRuns(steps: number): Promise<{ micros: number; cpuMicros: number }> {
  const works = await seedRuns(store, accountId, projectId, environmentId, RUNS_AT_ONCE);
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(
    works.map(async (workId) => {
      for (let index = 0; index < steps; index += 1) {
        const step = { index, name: `step ${index}`, startedAt: new Date().toISOString() };
        await apply(workId, { type: 'progress', body: { step: { ...step, status: 'RUNNING' } } });
        await apply(workId, {
          type: 'progress',
          body: { step: { ...step, status: 'SUCCESS', finishedAt: new Date().toISOString() } },
        });
      }
      await apply(workId, { type: 'done', body: {} });
    }),
  );
  const reports = works.length * (2 * steps + 1);
  const used = process.cpuUsage(cpu);
  return { micros: ((performance.now() - started) * 1000) / reports, cpuMicros: (used.user + used.system) / reports };
}

process.on('message', (message: { steps?: number; stop?: boolean }) => {
  if (message.stop) {
    void store.close().then(() => process.exit(0));
    return;
  }
  void reportRuns(message.steps ?? 1).then((result) => process.send!(result));
});
process.send!({ ready: true });
