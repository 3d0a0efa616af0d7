import { openStore, sql } from '../src/core/db/database.ts';
import { againstBaseline, load, record, startBenchServer, type BenchServer, type LoadResult } from './lib.ts';

/**
 * Writes `count` TEXT variables (named var_10000000, var_10000001, ...) into the project straight
 * through the store in one bulk INSERT ... SELECT over a generated series, with their counter.
 */
async function seedVariables(server: BenchServer, projectId: string, count: number): Promise<void> {
  const store = openStore({ dataDir: server.dataDir, databaseUrl: server.databaseUrl });
  try {
    await store.db.transaction().execute(async (trx) => {
      const id = sql<string>`cast(${projectId} as text)`;
      await sql`
        with recursive series(i) as (select 0 union all select i + 1 from series where i + 1 < ${count})
        insert into project_variables
          (id, project_id, name, type, behaviour, description, value, supports_double_resolution, created_at)
        select ${id} || ':' || i, ${id}, 'var_' || (10000000 + i), 'TEXT', 'SHARED', null, '"a value"', 0, ${new Date().toISOString()}
        from series`.execute(trx);
      await trx
        .insertInto('projectVariableCounts')
        .values({ projectId, total: count })
        .onConflict((oc) => oc.column('projectId').doUpdateSet({ total: count }))
        .execute();
    });
    if (store.dialect === 'postgres') await sql`analyze project_variables`.execute(store.db);
  } finally {
    await store.close();
  }
}

async function loadPage(server: BenchServer, projectId: string, page: number): Promise<LoadResult> {
  const url = `${server.url}/dpc/v1/projects/${projectId}/variables?page=${page}&size=25`;
  const headers = { authorization: `Bearer ${server.token}` };
  await load(url, { headers, seconds: 2 }); // warm-up
  return load(url, { headers });
}

/**
 * Page 0 and the last page of E3 at 1,000,000 variables against the same pages at 1,000: the total
 * is a counter, and a page in the second half of the list is read backwards from its end.
 */
async function flatWithSize(server: BenchServer, store: string): Promise<void> {
  const small = (await server.api('POST', '/projects', { name: 'thousand' })).projectId;
  const large = (await server.api('POST', '/projects', { name: 'million' })).projectId;
  await seedVariables(server, small, 1_000);
  const seeding = Date.now();
  await seedVariables(server, large, 1_000_000);
  console.log(`(${store}: seeded 1,000,000 variables in ${((Date.now() - seeding) / 1000).toFixed(1)} s)`);
  for (const [label, smallPage, largePage] of [
    ['page 0', 0, 0],
    ['last page', 1_000 / 25 - 1, 1_000_000 / 25 - 1],
  ] as const) {
    const atThousand = await loadPage(server, small, smallPage);
    const atMillion = await loadPage(server, large, largePage);
    const slowdown = atThousand.requestsPerSecond / atMillion.requestsPerSecond;
    console.log(
      `E3 ${label} (${store}): ${atThousand.requestsPerSecond.toFixed(0)} req/s at 1,000 variables, ${atMillion.requestsPerSecond.toFixed(0)} req/s at 1,000,000` +
        ` (p99 ${atThousand.p99Ms} / ${atMillion.p99Ms} ms) | slowdown ${slowdown.toFixed(2)}x (target <= 1.5x)` +
        (atThousand.errors + atMillion.errors ? ` | ${atThousand.errors + atMillion.errors} errors` : ''),
    );
    record({ name: `E3 ${label}, 1,000,000 against 1,000 variables (${store}): slowdown`, measured: slowdown, atMost: 1.5 });
  }
}

/** Creating variables, each request a new name, against a bare server answering the same bytes. */
async function creates(server: BenchServer, projectId: string): Promise<void> {
  let next = 0;
  const bodyOf = () => JSON.stringify({ name: `created_${next++}`, type: 'TEXT', behaviour: 'SHARED', value: 'a value' });
  await againstBaseline(server, 'E2 POST /v1/projects/{projectId}/variables (SQLite)', `/projects/${projectId}/variables`, {
    method: 'POST',
    body: bodyOf(),
    requests: [{ method: 'POST', setupRequest: (request: any) => ({ ...request, body: bodyOf() }) }],
    targets: { ratio: 0.15 },
  });
}

/** A new project with 10,000 variables; answers its id. */
async function projectOfTenThousand(server: BenchServer): Promise<string> {
  const { projectId } = await server.api('POST', '/projects', { name: 'variables' });
  await seedVariables(server, projectId, 10_000);
  return projectId;
}

/**
 * E3 (25 of 10,000 variables), E8 (10 overrides written per request) and variable creation against
 * the bare baseline on SQLite; E3 again on a server whose every read asks the store
 * (DPC_REMEMBER_READS=false, printed only), which also measures E3's first and last pages at 1,000,000
 * variables against 1,000, as PostgreSQL does (also asking the store at every read).
 */
export async function bench(): Promise<void> {
  const server = await startBenchServer();
  try {
    const projectId = await projectOfTenThousand(server);
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
      `/projects/${projectId}/variables/var_10000042/environment-overrides`,
      { method: 'POST', body },
    );
    await creates(server, projectId);
  } finally {
    await server.stop();
  }
  const asking = await startBenchServer({ env: { DPC_REMEMBER_READS: 'false' } });
  try {
    const projectId = await projectOfTenThousand(asking);
    await againstBaseline(
      asking,
      'E3 GET /v1/projects/{projectId}/variables (25 of 10,000, SQLite, every read asks the store)',
      `/projects/${projectId}/variables`,
    );
    await flatWithSize(asking, 'SQLite');
  } finally {
    await asking.stop();
  }
  const postgres = await startBenchServer({ postgres: true, env: { DPC_REMEMBER_READS: 'false' } });
  try {
    await flatWithSize(postgres, 'PostgreSQL');
  } finally {
    await postgres.stop();
  }
}
