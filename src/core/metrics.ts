import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { ProblemError } from './problems.ts';

/**
 * The server's Prometheus metrics, in a registry of its own per app. Labels are route templates,
 * methods, statuses and job types: never ids or anything a caller wrote.
 */
export class Metrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: 'dpc_http_requests_total',
    help: 'Requests answered, by method, route template and status',
    labelNames: ['method', 'route', 'status'],
    registers: [this.registry],
  });
  readonly requestSeconds = new Histogram({
    name: 'dpc_http_request_duration_seconds',
    help: 'Time to answer a request, by method, route template and status',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  readonly abandoned = new Counter({
    name: 'dpc_http_requests_abandoned_total',
    help: 'Requests whose client closed the connection before the answer, by route template',
    labelNames: ['method', 'route'],
    registers: [this.registry],
  });
  readonly rateLimited = new Counter({
    name: 'dpc_http_rate_limited_total',
    help: 'Requests refused by the rate limit (429)',
    registers: [this.registry],
  });
  readonly uploadBytes = new Counter({
    name: 'dpc_upload_received_bytes_total',
    help: 'Bytes of multipart upload bodies received (Content-Length, or read off the socket when chunked)',
    registers: [this.registry],
  });
  readonly storeQuerySeconds = new Histogram({
    name: 'dpc_store_query_duration_seconds',
    help: 'Time of each store query, by outcome (query or error)',
    labelNames: ['outcome'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers: [this.registry],
  });
  readonly jobOutcomes = new Counter({
    name: 'dpc_jobs_finished_total',
    help: 'Job runs by job type and outcome (done, retried, failed)',
    labelNames: ['type', 'outcome'],
    registers: [this.registry],
  });

  constructor(queueDepth: () => Promise<{ state: string; count: number }[]>) {
    collectDefaultMetrics({ register: this.registry, prefix: 'dpc_' });
    new Gauge({
      name: 'dpc_jobs',
      help: 'Jobs in the store by state (queued, running), counted when scraped',
      labelNames: ['state'],
      registers: [this.registry],
      async collect() {
        this.reset();
        for (const { state, count } of await queueDepth()) this.set({ state }, count);
      },
    });
  }
}

function routeOf(request: FastifyRequest): string {
  // Requests no route matched share one label, so a scan of made-up URLs cannot add series.
  return request.routeOptions.url ?? 'unmatched';
}

const uploadStart = new WeakMap<FastifyRequest, number>();

/** Counts every request and serves /metrics (when enabled; with a bearer token when one is configured). */
export const metricsPlugin = fp(async (app: FastifyInstance) => {
  const metrics = app.metrics;
  app.addHook('onRequest', (request, _reply, done) => {
    if (request.headers['content-type']?.startsWith('multipart/')) uploadStart.set(request, request.raw.socket?.bytesRead ?? 0);
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    const labels = { method: request.method, route: routeOf(request), status: String(reply.statusCode) };
    metrics.requests.inc(labels);
    metrics.requestSeconds.observe(labels, reply.elapsedTime / 1000);
    if (reply.statusCode === 429) metrics.rateLimited.inc();
    const start = uploadStart.get(request);
    if (start !== undefined) {
      // The declared length; a chunked body has none, so what was read off the socket meanwhile.
      const declared = Number(request.headers['content-length']);
      metrics.uploadBytes.inc(declared > 0 ? declared : Math.max(0, (request.raw.socket?.bytesRead ?? start) - start));
    }
    done();
  });
  app.addHook('onRequestAbort', async (request) => {
    metrics.abandoned.inc({ method: request.method, route: routeOf(request) });
  });
  if (!app.config.metrics) return;
  const token = app.config.metricsToken;
  app.get('/metrics', { schema: { hide: true } }, async (request, reply) => {
    if (token && request.headers.authorization !== `Bearer ${token}`) {
      throw new ProblemError(401, 'The metrics need "Authorization: Bearer <DPC_METRICS_TOKEN>".', {
        headers: { 'www-authenticate': 'Bearer' },
      });
    }
    reply.type(metrics.registry.contentType);
    return metrics.registry.metrics();
  });
});
