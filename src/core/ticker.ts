import type { FastifyInstance } from 'fastify';

/**
 * Periodic work of a server process (with background work on): every `intervalMs`, one run of `task` at a
 * time, started when the server is ready and awaited when it closes. Not a JobQueue job: it is periodic,
 * not one-off work, and what must happen once across instances is decided by compare-and-set updates on the
 * rows themselves. An area starts its own (executions sweep runs out of contact, schedules start due runs).
 */
export function runPeriodically(app: FastifyInstance, name: string, intervalMs: number, task: () => Promise<unknown>): void {
  if (!app.config.runJobs) return;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;
  const schedule = () => {
    timer = setTimeout(() => {
      running = task()
        .then(() => undefined)
        .catch((error) => app.log.error({ err: error }, `${name} failed`))
        .finally(() => {
          running = undefined;
          if (!stopped) schedule();
        });
    }, intervalMs);
    timer.unref();
  };
  app.addHook('onReady', async () => {
    stopped = false;
    schedule();
  });
  app.addHook('onClose', async () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    await running;
  });
}
