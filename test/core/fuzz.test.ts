import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, TestServer, type Caller } from '../helpers/harness.ts';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

/** Values that have broken servers: bounds, types, encodings, injection, NUL, lone surrogates, huge numbers. */
const HOSTILE_TEXT = [
  '',
  ' ',
  'x'.repeat(5000),
  '../../etc/passwd',
  "' or 1=1 --",
  '%00',
  '%zz',
  '\u0000',
  '\ud800',
  '💥',
  '-1',
  '9999999999999999999999',
  'NaN',
  '{"a":1}',
  '<script>',
  '00000000-0000-0000-0000-000000000000',
];
const HOSTILE_JSON: unknown[] = [
  null,
  0,
  -1,
  1e308,
  true,
  'text',
  [],
  [{}],
  {},
  { name: '\u0000' },
  { name: '\ud800', type: 'NUMBER', behaviour: 'SHARED', value: '\ud800' },
  { name: 'x'.repeat(10_000) },
  { enabled: 'yes', page: -1, size: 1e9 },
  { __proto__: { polluted: true }, constructor: { prototype: { polluted: true } } },
];

/**
 * Walks every operation of the served OpenAPI document with hostile path, query and body values, within a
 * fixed number of requests: no answer may be a 5xx, and every error must be problem+json. Operations
 * added later are covered because the document is read at run time.
 */
describeEachStore('fuzzing every operation of the OpenAPI document', (kind) => {
  let server: TestServer;
  let caller: Caller;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
  });
  after(() => server.close());

  test('hostile values never answer 5xx, and every error is in a declared form', { timeout: 120_000 }, async () => {
    const projectId = await server.newProject(caller);
    const document = (await server.request('GET', '/dpc/openapi.json')).body;
    const operations = Object.entries(document.paths as Record<string, Record<string, any>>).flatMap(([path, item]) =>
      METHODS.filter((method) => item[method] && path.startsWith('/dpc/v1/')).map((method) => ({
        path,
        method,
        operation: item[method],
      })),
    );
    assert.ok(operations.length > 20);
    const failures: string[] = [];
    let sent = 0;
    const check = async (method: string, url: string, body: unknown, declared: Record<string, unknown>) => {
      sent += 1;
      const answer = await server.request(method.toUpperCase(), url, {
        token: caller.token,
        body: body === undefined ? undefined : JSON.stringify(body),
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
      });
      const contentType = answer.headers.get('content-type') ?? '';
      if (!declared[answer.status]) failures.push(`${method.toUpperCase()} ${url}: ${answer.status} is not in the document`);
      if (answer.status >= 500) failures.push(`${method.toUpperCase()} ${url}: ${answer.status} ${answer.text.slice(0, 200)}`);
      else if (answer.status >= 400) {
        // problem+json, or another error form the document declares for the status (SCIM's error, for SCIM operations).
        const forms = Object.keys((declared[answer.status] as { content?: object } | undefined)?.content ?? {});
        const declaredForm = forms.some((form) => form !== '*/*' && contentType.startsWith(form));
        if (!contentType.startsWith('application/problem+json') && !declaredForm) {
          failures.push(`${method.toUpperCase()} ${url}: ${answer.status} answered ${contentType}`);
        }
      }
    };
    for (const [index, { path, method, operation }] of operations.entries()) {
      const parameters = (operation.parameters ?? []) as { name: string; in: string }[];
      const query = parameters.filter((p) => p.in === 'query').map((p) => p.name);
      for (const [k, text] of HOSTILE_TEXT.entries()) {
        // Path parameters hostile in turn, the project id real half of the time so checks past it are reached.
        const filled = path.replace(/\{(\w+)\}/g, (_, name: string) =>
          name === 'projectId' && k % 2 === 0 ? projectId : encodeURIComponent(text.replace(/[\ud800-\udfff]/g, '\ufffd')),
        );
        const search = new URLSearchParams(query.map((name) => [name, text.replace(/[\ud800-\udfff]/g, '\ufffd')]));
        const body = ['post', 'put', 'patch'].includes(method) ? HOSTILE_JSON[(index + k) % HOSTILE_JSON.length] : undefined;
        await check(method, `${filled}${query.length > 0 ? `?${search}` : ''}`, body, operation.responses);
      }
    }
    assert.ok(sent >= operations.length * HOSTILE_TEXT.length);
    assert.deepEqual(failures, []);
  });
});
