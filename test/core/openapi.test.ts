import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TestServer } from '../helpers/harness.ts';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

test('the OpenAPI document describes every operation, its security, errors and examples', async (t) => {
  const server = await TestServer.start('sqlite');
  t.after(() => server.close());
  const answer = await server.request('GET', '/dpc/openapi.json');
  assert.equal(answer.status, 200);
  const document = answer.body;
  assert.equal(document.openapi, '3.1.0');
  assert.deepEqual(document.components.securitySchemes.bearerAuth, { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
  assert.ok(document.components.schemas.ProblemDetail);

  const routes = server.server.app.printRoutes({ commonPrefix: false });
  const operations = Object.entries(document.paths as Record<string, Record<string, any>>).flatMap(([path, item]) =>
    METHODS.filter((method) => item[method]).map((method) => ({ path, method, operation: item[method] })),
  );
  const v1 = operations.filter((o) => o.path.startsWith('/dpc/v1/'));
  assert.ok(v1.length >= 40, `only ${v1.length} operations documented`);
  for (const { path, method, operation } of v1) {
    const name = `${method.toUpperCase()} ${path}`;
    assert.ok(operation.summary, `${name} has a summary`);
    assert.deepEqual(operation.security, [{ bearerAuth: [] }], `${name} needs a bearer token`);
    const statuses = Object.keys(operation.responses);
    assert.ok(
      statuses.some((s) => s.startsWith('2')),
      `${name} documents its success`,
    );
    for (const status of ['400', '401', '403', '404', '500']) {
      assert.ok(
        operation.responses[status]?.content?.['application/problem+json'],
        `${name} documents ${status} as problem+json`,
      );
    }
    const body = operation.requestBody?.content?.['application/json'];
    if (body?.schema?.type === 'object') assert.ok(body.example ?? body.examples, `${name} has a request example`);
  }
  // Every documented path is a real route.
  for (const { path } of operations) {
    const fastifyPath = path.replace(/\{(\w+)\}/g, ':$1');
    assert.ok(routes.includes(fastifyPath.split('/').pop()!), path);
  }
  for (const path of ['/dpc/v1/projects', '/dpc/v1/projects/{projectId}', '/dpc/v1/events', '/oauth/dpc/token']) {
    assert.ok(document.paths[path], path);
  }
  // Every operation has a unique operationId; nothing with a default is required; no token where none is needed.
  const ids = operations.map((o) => o.operation.operationId);
  assert.ok(
    ids.every((id) => typeof id === 'string' && /^[a-z][A-Za-z0-9]*$/.test(id)),
    'operationIds',
  );
  assert.equal(new Set(ids).size, ids.length, 'operationIds are unique');
  for (const { path, method, operation } of operations) {
    for (const parameter of operation.parameters ?? []) {
      if (parameter.schema?.default !== undefined) {
        assert.notEqual(parameter.required, true, `${method} ${path}: ${parameter.name} has a default`);
      }
    }
    // The agent protocol takes an agent's bearer token; everything else outside /dpc/v1 needs none.
    const needsToken = path.startsWith('/dpc/v1/') || path.startsWith('/dpc/agent/v1/');
    if (!needsToken) assert.deepEqual(operation.security, [], `${method} ${path} needs no token`);
  }
  assert.equal(document.paths['/dpc/v1/projects/{projectId}/variables'].get.operationId, 'getProjectsByProjectIdVariables');
});

describe('documentation pages', () => {
  let server: TestServer;
  before(async () => {
    server = await TestServer.start('sqlite');
  });
  after(() => server.close());
  test('the reference page and the health check answer', async () => {
    const docs = await server.request('GET', '/dpc/docs/');
    assert.equal(docs.status, 200);
    assert.match(docs.headers.get('content-type') ?? '', /text\/html/);
    const health = await server.request('GET', '/healthz');
    assert.deepEqual([health.status, health.body], [200, { status: 'ok' }]);
  });
});
