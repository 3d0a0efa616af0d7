import { randomUUID } from 'node:crypto';
import { openStore } from '../src/core/db/database.ts';
import { againstBaseline, load, record, startBenchServer, type BenchServer, type LoadResult } from './lib.ts';

const BATCH = 2000;

/** Writes `count` TEXT variables into the project straight through the store, in one transaction, with their counter. */
async function seedVariables(server: BenchServer, projectId: string, count: number): Promise<void> {
  const store = openStore({ dataDir: server.dataDir, databaseUrl: undefined });
  try {
    const createdAt = new Date().toISOString();
    await store.db.transaction().execute(async (trx) => {
      for (let start = 0; start < count; start += BATCH) {
        const rows = Array.from({ length: Math.min(BATCH, count - start) }, (_, i) => ({
          id: randomUUID(),
          projectId,
          name: `var_${String(start + i).padStart(7, '0')}`,
          type: 'TEXT',
          behaviour: 'SHARED',
          description: null,
          value: JSON.stringify(`value ${start + i}`),
          supportsDoubleResolution: 0,
          createdAt,
        }));
        await trx.insertInto('projectVariables').values(rows).execute();
      }
      await trx
        .insertInto('projectVariableCounts')
        .values({ projectId, total: count })
        .onConflict((oc) => oc.column('projectId').doUpdateSet({ total: count }))
        .execute();
    });
  } finally {
    await store.close();
  }
}

async function pageZero(server: BenchServer, projectId: string): Promise<LoadResult> {
  const url = `${server.url}/dpc/v1/projects/${projectId}/variables`;
  const headers = { authorization: `Bearer ${server.token}` };
  await load(url, { headers, seconds: 2 }); // warm-up
  return load(url, { headers });
}

/**
 * E3 (25 of 10,000 variables) and E8 (10 overrides written per request) against the bare baseline,
 * and E3's page 0 at 1,000,000 variables against 1,000: the total comes from a counter, not a count.
 */
export async function bench(): Promise<void> {
  const server = await startBenchServer();
  try {
    const { projectId } = await server.api('POST', '/projects', { name: 'variables' });
    await seedVariables(server, projectId, 10_000);
    await againstBaseline(
      server,
      'E3 GET /v1/projects/{projectId}/variables (25 of 10,000, SQLite)',
      `/projects/${projectId}/variables`,
      { targets: { ratio: 0.35, p99Ms: 5 } },
    );

    const environments = Array.from({ length: 10 }, (_, i) => `env-${i}`);
    for (const name of environments) await server.api('POST', `/projects/${projectId}/environments`, { name });
    const body = JSON.stringify(environments.map((environmentName, i) => ({ environmentName, value: `override ${i}` })));
    await againstBaseline(
      server,
      'E8 POST .../variables/{variableName}/environment-overrides (10 overrides, SQLite)',
      `/projects/${projectId}/variables/var_0000042/environment-overrides`,
      { method: 'POST', body },
    );

    const small = (await server.api('POST', '/projects', { name: 'thousand' })).projectId;
    const large = (await server.api('POST', '/projects', { name: 'million' })).projectId;
    await seedVariables(server, small, 1_000);
    const seeding = Date.now();
    await seedVariables(server, large, 1_000_000);
    console.log(`(seeded 1,000,000 variables in ${((Date.now() - seeding) / 1000).toFixed(1)} s)`);
    const atThousand = await pageZero(server, small);
    const atMillion = await pageZero(server, large);
    const slowdown = atThousand.requestsPerSecond / atMillion.requestsPerSecond;
    console.log(
      `E3 page 0: ${atThousand.requestsPerSecond.toFixed(0)} req/s at 1,000 variables, ${atMillion.requestsPerSecond.toFixed(0)} req/s at 1,000,000` +
        ` (p99 ${atThousand.p99Ms} / ${atMillion.p99Ms} ms) | slowdown ${slowdown.toFixed(2)}x (target <= 1.5x)` +
        (atThousand.errors + atMillion.errors ? ` | ${atThousand.errors + atMillion.errors} errors` : ''),
    );
    record({ name: 'E3 page 0, 1,000,000 against 1,000 variables: slowdown', measured: slowdown, atMost: 1.5 });
  } finally {
    await server.stop();
  }
}
