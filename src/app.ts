import { randomUUID } from 'node:crypto';
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import pino from 'pino';
import './core/context.ts';
import type { Config } from './core/config.ts';
import type { Store } from './core/db/database.ts';
import { serializingKeptAnswersOnce } from './core/db/remembered.ts';
import { TokenService } from './core/auth/tokens.ts';
import { authPlugin } from './core/auth/plugin.ts';
import { auditPlugin } from './core/audit.ts';
import { idempotencyPlugin } from './core/idempotency.ts';
import { conditionalRequestsPlugin } from './core/conditional.ts';
import { errorsPlugin, sendProblem } from './core/errors-plugin.ts';
import { rawProblemResponse } from './core/problems.ts';
import { JobQueue } from './core/jobs.ts';
import { OutboxWakeups } from './core/outbox-wakeups.ts';
import { SecretBox } from './core/secret-box.ts';
import { openApiPlugin } from './core/openapi.ts';
import { Metrics, metricsPlugin } from './core/metrics.ts';
import { builtOnFirstUse, validatorCompiler } from './core/validation.ts';
import { acceptEmptyJsonBodies } from './core/json-bodies.ts';
import { AgentDeletion, AgentWorkReports, HostedAgents } from './areas/agents/index.ts';
import { ProjectDeletion } from './areas/projects/index.ts';
import { healthRoutes } from './areas/health/routes.ts';
import { identityRoutes } from './areas/identity/routes.ts';
import { projectRoutes } from './areas/projects/routes.ts';
import { environmentRoutes } from './areas/environments/routes.ts';
import { eventRoutes } from './areas/events/routes.ts';
import { consumptionRoutes } from './areas/consumption/routes.ts';
import { lineageRoutes } from './areas/lineage/routes.ts';
import { reviewRoutes } from './areas/reviews/routes.ts';
import { eventFeedRoutes } from './areas/event-feed/routes.ts';
import { webhookRoutes } from './areas/webhooks/routes.ts';
import { connectionRoutes } from './areas/connections/routes.ts';
import { variableRoutes } from './areas/variables/routes.ts';
import { secretReferenceRoutes } from './areas/secret-references/routes.ts';
import { artifactRoutes } from './areas/artifacts/routes.ts';
import { sharedPipelineRoutes } from './areas/shared-pipelines/routes.ts';
import { connectorRoutes } from './areas/connectors/routes.ts';
import { oauthConnectionRoutes } from './areas/oauth-connections/routes.ts';
import { directoryIntegrationRoutes, scimUrlWithoutTrailingSlash } from './areas/scim/routes.ts';
import { executionRoutes } from './areas/executions/routes.ts';
import { scheduleRoutes } from './areas/schedules/routes.ts';
import { agentRoutes } from './areas/agents/routes.ts';
import { agentProtocolRoutes } from './areas/agents/protocol.ts';
import { secretValueRoutes } from './areas/secret-values/routes.ts';
import { streamingPipelineRoutes } from './areas/streaming-pipelines/routes.ts';
import { repositoryRoutes } from './areas/repositories/routes.ts';
import { gitHostingRoutes } from './areas/repositories/git-routes.ts';
import { aiTaskRoutes } from './areas/ai-tasks/routes.ts';
import { consoleRoutes } from './areas/console/routes.ts';

/** The operations under /dpc/v1, each area in its own folder. Add an area here. */
const v1Areas = [
  projectRoutes,
  environmentRoutes,
  connectionRoutes,
  variableRoutes,
  secretReferenceRoutes,
  artifactRoutes,
  sharedPipelineRoutes,
  connectorRoutes,
  oauthConnectionRoutes,
  directoryIntegrationRoutes,
  agentRoutes,
  secretValueRoutes,
  streamingPipelineRoutes,
  repositoryRoutes,
  aiTaskRoutes,
  eventRoutes,
  consumptionRoutes,
  lineageRoutes,
  reviewRoutes,
  eventFeedRoutes,
  webhookRoutes,
  executionRoutes,
  scheduleRoutes,
];

/** What an incoming request id may be: a token of at most 128 characters. */
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export interface AppOptions {
  config: Config;
  store: Store;
  logger?: FastifyServerOptions['logger'];
}

/** Builds the whole server: shared plumbing first, then the identity endpoints, then every /dpc/v1 area. */
export async function buildApp({ config, store, logger }: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    // Log lines are written in the background: a synchronous write to stdout per line would hold up
    // the request that logs it (pino flushes what is buffered when the process exits).
    logger: logger ?? { level: config.logLevel, stream: pino.destination({ sync: false }) },
    logController: new LogController({ disableRequestLogging: true }),
    // An incoming X-Request-Id is kept when it is a sane token, so a request can be followed across
    // services; anything else (too long, odd characters, log injection) is replaced.
    genReqId: (request) => {
      const incoming = request.headers['x-request-id'];
      return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    },
    bodyLimit: config.bodyLimit,
    // Responses are serialized from their schemas (fast-json-stringify, Fastify's own), a remembered answer once.
    schemaController: {
      compilersFactory: {
        buildSerializer: (schemas, options) => {
          const compile = SerializerSelector()(schemas, options);
          // Compiled when first used, as validators are (core/validation.ts): most routes of a process never answer.
          return (route) => {
            const serialize = builtOnFirstUse(() => serializingKeptAnswersOnce(compile(route)));
            return (data: unknown) => serialize()(data);
          };
        },
      },
    },
    // Names in paths may be 255 characters (variableName, environmentName), more once percent-encoded.
    routerOptions: { maxParamLength: 1024 },
    // SCIM clients name a collection with a trailing slash too: `/Users/` is `/Users`.
    rewriteUrl: (request) => scimUrlWithoutTrailingSlash(request.method ?? 'GET', request.url ?? '/'),
    return503OnClosing: true,
    // Failures of the HTTP parser come before there is a request; they are answered as problems too.
    clientErrorHandler: (error: NodeJS.ErrnoException, socket) => {
      if (!socket.writable) return socket.destroy();
      const [status, detail] =
        error.code === 'HPE_HEADER_OVERFLOW'
          ? [431, 'The request headers are too large.']
          : error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
            ? [408, 'The request took too long to arrive.']
            : [400, 'The request is not valid HTTP (a malformed request line or header).'];
      socket.end(rawProblemResponse(config.problemTypeBase, status, detail));
    },
    // A URL the router cannot take (bad encoding, an over-long segment) is answered like every other error.
    frameworkErrors: (error, request, reply) => {
      const detail = error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'A path segment is too long.' : 'The URL is not valid.';
      sendProblem(request, reply, error.statusCode ?? 400, detail);
    },
  });

  app.setValidatorCompiler(validatorCompiler);
  app.decorate('config', config);
  app.decorate('store', store);
  app.decorate('secretBox', SecretBox.fromConfig(config));
  app.decorate('tokens', new TokenService(store.db, config, app.secretBox));
  app.addHook('onReady', () =>
    app.tokens.startRefreshing((error) => app.log.warn({ err: error }, 'could not reload revoked clients')),
  );
  app.addHook('onClose', async () => app.tokens.stopRefreshing());
  const metrics = new Metrics(() => app.jobs.depth());
  store.onQuery = (durationMs, failed) =>
    metrics.storeQuerySeconds.observe({ outcome: failed ? 'error' : 'query' }, durationMs / 1000);
  app.decorate('metrics', metrics);
  app.decorate(
    'jobs',
    new JobQueue(store, {
      log: app.log,
      leaseMs: config.jobLeaseMs,
      onOutcome: (type, outcome) => metrics.jobOutcomes.inc({ type, outcome }),
    }),
  );
  app.decorate('outboxWakeups', new OutboxWakeups(config.databaseUrl, app.log));
  app.addHook('onClose', async () => app.outboxWakeups.close());
  app.decorate('shuttingDown', false);
  app.decorate('projectDeletion', new ProjectDeletion());
  app.decorate('agentWorkReports', new AgentWorkReports());
  app.decorate('agentDeletion', new AgentDeletion());
  app.decorate('hostedAgents', new HostedAgents(store.db, app.secretBox, config, app.log));
  app.addHook('onClose', async () => app.hostedAgents.stop());
  // Every kind of work the contract names has a report handler, or the server does not start.
  app.addHook('onReady', async () => app.agentWorkReports.assertComplete());

  // One structured line per request; the default serializers carry no headers, so no credential is logged.
  // (Hooks on every request take a callback rather than returning a promise: a promise per hook and
  // request is measurable on the hot read path.)
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id);
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    request.log.info(
      {
        method: request.method,
        route: request.routeOptions.url,
        url: request.url.split('?')[0],
        status: reply.statusCode,
        durationMs: Math.round(reply.elapsedTime * 100) / 100,
      },
      'request completed',
    );
    done();
  });
  app.addHook('onRequestAbort', async (request) => {
    request.log.info(
      { method: request.method, route: request.routeOptions.url, url: request.url.split('?')[0] },
      'request abandoned by the client',
    );
  });

  // JSON operations answer 415 to anything but JSON; multipart areas add their own parser.
  app.removeContentTypeParser('text/plain');
  // An empty JSON body is no body (clients send one header set on every call).
  acceptEmptyJsonBodies(app);
  await app.register(errorsPlugin);
  await app.register(openApiPlugin);
  await app.register(metricsPlugin);
  await app.register(healthRoutes);
  await app.register(consoleRoutes);
  await app.register(async (scope) => {
    if (config.rateLimitMax > 0) {
      // Counted per API client or agent where there is one (after authentication), else per address.
      await scope.register(rateLimit, {
        max: config.rateLimitMax,
        timeWindow: config.rateLimitWindowMs,
        hook: 'preHandler',
        keyGenerator: (request) => request.principal?.clientId ?? request.agent?.clientId ?? request.ip,
      });
    }
    await scope.register(identityRoutes);
    await scope.register(agentProtocolRoutes, { prefix: '/dpc/agent/v1' });
    await scope.register(
      async (v1) => {
        await v1.register(authPlugin);
        // Idempotency-Key on POST and PATCH: a retry is answered as the first was, without doing the work again.
        await v1.register(idempotencyPlugin);
        // Every answer carries a strong ETag of its body: a GET sent again with If-None-Match answers 304
        // without the body when nothing changed, which is how the console polls (at most one request a view per 2 s);
        // If-Match on PUT, PATCH and DELETE answers 412 on a lost update.
        await v1.register(conditionalRequestsPlugin);
        await v1.register(auditPlugin);
        for (const area of v1Areas) await v1.register(area);
      },
      { prefix: '/dpc/v1' },
    );
    await scope.register(gitHostingRoutes, { prefix: '/dpc/git' });
  });
  return app;
}
