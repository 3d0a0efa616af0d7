import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Answer } from '../helpers/harness.ts';

const SCIM = 'application/scim+json';
const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';
const GROUP = 'urn:ietf:params:scim:schemas:core:2.0:Group';
const EXTENSION = 'urn:matillion:params:scim:schemas:extension:dpc:2.0:Group';
const BASE = '/directory-integration/scim/v2';

function expectScimError(answer: Answer, status: number) {
  assert.equal(answer.status, status, answer.text);
  assert.ok(answer.headers.get('content-type')?.startsWith(SCIM), `${answer.headers.get('content-type')} ${answer.text}`);
  assert.deepEqual(answer.body.schemas, [ERROR]);
  assert.equal(answer.body.status, String(status));
  return answer.body;
}

/**
 * Strict SCIM clients, as RFC 7643/7644 test suites are: errors in the SCIM form whatever they accept
 * (`*` / `*`, application/json or nothing), unknown paths and methods under the base included; extension
 * attributes only inside the object keyed by the extension's URN; the root's .search; `/Users/` as `/Users`.
 */
describeEachStore('strict SCIM clients', (kind) => {
  let server: TestServer;
  let token: string;
  let accountId: string;
  before(async () => {
    server = await TestServer.start(kind);
    const caller = await server.newAccount();
    accountId = caller.accountId;
    token = (await server.api('POST', '/directory-integration/tokens', { token: caller.token, body: { name: 'suite' } })).body
      .token;
  });
  after(() => server.close());

  const scim = (method: string, path: string, body?: unknown, accept: string | undefined = SCIM) =>
    server.api(method, `${BASE}${path}`, {
      token,
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: { ...(accept !== undefined && { accept }), ...(body !== undefined && { 'content-type': SCIM }) },
    });

  test('a Group answers its extension attributes only inside the extension object', async () => {
    const created = await scim('POST', '/Groups', {
      schemas: [GROUP, EXTENSION],
      displayName: 'Engineers',
      [EXTENSION]: { environment: 'production' },
    });
    assert.equal(created.status, 201, created.text);
    for (const answer of [created, await scim('GET', `/Groups/${created.body.id}`)]) {
      assert.deepEqual(answer.body.schemas, [GROUP, EXTENSION]);
      assert.equal(answer.body[EXTENSION].accountId, accountId);
      assert.equal(answer.body[EXTENSION].environment, 'production');
      for (const name of ['accountId', 'accountName', 'projectId', 'projectName', 'environment', 'role']) {
        assert.equal(answer.body[name], undefined, `${name} at the top level`);
      }
    }
    const listed = await scim('GET', '/Groups');
    assert.ok(listed.body.Resources.every((group: Record<string, unknown>) => group.accountId === undefined));
  });

  test('errors are SCIM errors unless the client asks for problem+json only', async () => {
    for (const accept of [SCIM, '*/*', 'application/json', undefined]) {
      expectScimError(await scim('GET', '/Users?count=many', undefined, accept), 400);
      expectScimError(await scim('GET', `/Users/${crypto.randomUUID()}`, undefined, accept), 404);
      // Unknown paths and methods under the SCIM base too.
      expectScimError(await scim('GET', '/Nonsense', undefined, accept), 404);
      expectScimError(await scim('GET', '/Users/a/b/c', undefined, accept), 404);
      const wrongMethod = expectScimError(await scim('PUT', '/Users', {}, accept), 405);
      assert.match(wrongMethod.detail, /PUT/);
    }
    const problem = expectProblem(await scim('GET', '/Nonsense', undefined, 'application/problem+json'), 404);
    assert.match(problem.detail, /Nonsense/);
    expectProblem(await scim('GET', '/Users?count=many', undefined, 'application/problem+json'), 400);
  });

  test("the root's POST /.search answers 501 in the SCIM form", async () => {
    const body = { schemas: ['urn:ietf:params:scim:api:messages:2.0:SearchRequest'], filter: 'userName pr' };
    for (const accept of [SCIM, '*/*']) {
      const error = expectScimError(await scim('POST', '/.search', body, accept), 501);
      assert.match(error.detail, /Users\/\.search/);
    }
  });

  test('/Users/ and /Groups/ are /Users and /Groups', async () => {
    const made = await scim('POST', '/Users/', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      userName: 'slash@example.com',
    });
    assert.equal(made.status, 201, made.text);
    assert.equal(made.headers.get('location'), made.body.meta.location);
    assert.ok(!made.body.meta.location.includes('//Users'));
    const withSlash = await scim('GET', '/Users/?filter=userName%20eq%20%22slash@example.com%22');
    const without = await scim('GET', '/Users?filter=userName%20eq%20%22slash@example.com%22');
    assert.equal(withSlash.status, 200, withSlash.text);
    assert.deepEqual(withSlash.body, without.body);
    assert.equal(withSlash.body.totalResults, 1);
    const groups = await scim('GET', '/Groups/');
    assert.equal(groups.status, 200, groups.text);
    assert.deepEqual(groups.body, (await scim('GET', '/Groups')).body);
  });
});
