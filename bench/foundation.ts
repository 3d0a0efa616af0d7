import { load, report, startBareServer, startBenchServer } from './lib.ts';

/** An authenticated paged list (25 environments of a project) against a bare server answering the same bytes. */
export async function bench(): Promise<void> {
  const server = await startBenchServer();
  try {
    const { projectId } = await server.api('POST', '/projects', { name: 'bench' });
    for (let i = 0; i < 30; i += 1)
      await server.api('POST', `/projects/${projectId}/environments`, { name: `env-${String(i).padStart(2, '0')}` });
    const listPath = `/dpc/v1/projects/${projectId}/environments`;
    const headers = { authorization: `Bearer ${server.token}` };
    const sample = await (await fetch(`${server.url}${listPath}`, { headers })).text();
    const bare = await startBareServer(sample);
    try {
      await load(`${server.url}${listPath}`, { headers, seconds: 2 }); // warm-up
      const subject = await load(`${server.url}${listPath}`, { headers });
      const baseline = await load(bare.url, { headers });
      report('GET /v1/projects/{projectId}/environments (25 items, SQLite)', subject, baseline, 'ratio >= 0.6, p99 < 10 ms');
    } finally {
      await bare.stop();
    }
  } finally {
    await server.stop();
  }
}
