import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { TestServer } from '../helpers/harness.ts';
import { compileEverySchemaNow } from '../../src/core/validation.ts';

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

  // Checks and serializers are compiled on first use: every one of them compiles.
  assert.ok(compileEverySchemaNow() > 100, 'the routes have checks and serializers to compile');

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
    const tokenFree = ['/oauth/dpc/token', '/.well-known/jwks.json'].includes(path);
    assert.deepEqual(operation.security, tokenFree ? [] : [{ bearerAuth: [] }], `${method} ${path} security`);
  }
  assert.equal(document.paths['/dpc/v1/projects/{projectId}/variables'].get.operationId, 'getProjectsByProjectIdVariables');
});

test("the public contract names no operation by the specification's E-numbers", async (t) => {
  const server = await TestServer.start('sqlite');
  t.after(() => server.close());
  const document = (await server.request('GET', '/dpc/openapi.json')).body;
  const found: string[] = [];
  const walk = (value: unknown, at: string): void => {
    if (typeof value === 'string') {
      if (/\bE\d{1,2}\b/.test(value)) found.push(`${at}: ${value}`);
    } else if (Array.isArray(value)) value.forEach((item, index) => walk(item, `${at}/${index}`));
    else if (value && typeof value === 'object') for (const [key, item] of Object.entries(value)) walk(item, `${at}/${key}`);
  };
  walk(document, '#');
  assert.deepEqual(found, []);
});

test('bodies and answers are named component schemas; answers have descriptions, headers and every status the server can give', async (t) => {
  const server = await TestServer.start('sqlite');
  t.after(() => server.close());
  const document = (await server.request('GET', '/dpc/openapi.json')).body;
  const schemas = document.components.schemas;
  for (const name of [
    'Project',
    'ProjectPage',
    'CreateProjectRequest',
    'CreateProjectResponse',
    'TokenRequest',
    'FlexConnectorList',
  ]) {
    assert.ok(schemas[name], `component ${name}`);
  }
  const isNamedOrPlain = (schema: any) => typeof schema.$ref === 'string' || !['object', 'array'].includes(schema.type);
  for (const [path, item] of Object.entries(document.paths as Record<string, Record<string, any>>)) {
    for (const method of METHODS.filter((m) => item[m])) {
      const operation = item[method];
      const name = `${method.toUpperCase()} ${path}`;
      for (const [type, media] of Object.entries<any>(operation.requestBody?.content ?? {})) {
        assert.ok(isNamedOrPlain(media.schema), `${name} request ${type} is a named schema`);
      }
      for (const [status, response] of Object.entries<any>(operation.responses)) {
        assert.ok(response.description && response.description !== 'Default Response', `${name} ${status} has a description`);
        for (const [type, media] of Object.entries<any>(response.content ?? {})) {
          assert.ok(isNamedOrPlain(media.schema), `${name} ${status} ${type} is a named schema`);
        }
      }
      const statuses = Object.keys(operation.responses);
      const expected = [
        '429',
        '431',
        '500',
        '503',
        ...(path.includes('{') ? ['414'] : []),
        ...(method === 'post' ? ['413', '415'] : []),
      ];
      for (const status of expected) assert.ok(statuses.includes(status), `${name} declares ${status}`);
      assert.ok(operation.responses['429'].headers['Retry-After'], `${name} 429 declares Retry-After`);
      if (operation.responses['201']) assert.ok(operation.responses['201'].headers.Location, `${name} 201 declares Location`);
      if (operation.responses['401'])
        assert.ok(operation.responses['401'].headers['WWW-Authenticate'], `${name} 401 declares WWW-Authenticate`);
    }
  }
  const token = document.paths['/oauth/dpc/token'].post.requestBody.content['application/x-www-form-urlencoded'].schema;
  const form = schemas[token.$ref.split('/').pop()];
  assert.deepEqual(form.required, ['grant_type', 'client_id', 'client_secret']);
  assert.deepEqual(form.properties.grant_type.enum, ['client_credentials']);
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
