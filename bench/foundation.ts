import { againstBaseline, startBenchServer } from './lib.ts';

/** An authenticated paged list (25 environments of a project) against a bare server answering the same bytes. */
export async function bench(): Promise<void> {
  const server = await startBenchServer();
  try {
    const { projectId } = await server.api('POST', '/projects', { name: 'bench' });
    for (let i = 0; i < 30; i += 1)
      await server.api('POST', `/projects/${projectId}/environments`, { name: `env-${String(i).padStart(2, '0')}` });
    await againstBaseline(
      server,
      'GET /v1/projects/{projectId}/environments (25 items, SQLite)',
      `/projects/${projectId}/environments`,
      { targets: { ratio: 0.35, p99Ms: 5 } },
    );
  } finally {
    await server.stop();
  }
}
