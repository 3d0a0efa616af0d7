import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Answer, type Caller } from '../helpers/harness.ts';

const SCIM = 'application/scim+json';
const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';
const GROUP_EXTENSION = 'urn:matillion:params:scim:schemas:extension:dpc:2.0:Group';
const BASE = '/directory-integration/scim/v2';

/** Asserts a SCIM error answer (RFC 7644 3.12) and returns its body. */
function expectScimError(answer: Answer, status: number, scimType?: string) {
  assert.equal(answer.status, status, answer.text);
  assert.ok(answer.headers.get('content-type')?.startsWith(SCIM), answer.headers.get('content-type') ?? '');
  assert.deepEqual(answer.body.schemas, [ERROR]);
  assert.equal(answer.body.status, String(status));
  assert.equal(typeof answer.body.detail, 'string');
  if (scimType) assert.equal(answer.body.scimType, scimType, answer.text);
  return answer.body;
}

const patchOf = (...Operations: unknown[]) => ({ schemas: [PATCH_OP], Operations });

describeEachStore('directory integration (SCIM 2.0)', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let token: string;
  before(async () => {
    server = await TestServer.start(kind);
    caller = await server.newAccount();
    const created = await server.api('POST', '/directory-integration/tokens', { token: caller.token, body: { name: 'idp' } });
    assert.equal(created.status, 201, created.text);
    token = created.body.token;
  });
  after(() => server.close());

  /** A SCIM request as identity providers send it: scim+json both ways, the directory token. */
  const scim = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}, as = token) =>
    server.api(method, `${BASE}${path}`, {
      token: as,
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: { accept: SCIM, ...(body !== undefined && { 'content-type': SCIM }), ...headers },
    });

  async function user(userName: string, extra: Record<string, unknown> = {}, as = token) {
    const answer = await scim(
      'POST',
      '/Users',
      { schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userName, ...extra },
      {},
      as,
    );
    assert.equal(answer.status, 201, answer.text);
    return answer.body;
  }
  async function group(displayName: string, extra: Record<string, unknown> = {}) {
    const answer = await scim('POST', '/Groups', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
      displayName,
      ...extra,
    });
    assert.equal(answer.status, 201, answer.text);
    return answer.body;
  }
  const ids = (list: Answer) =>
    list.body.Resources.map((r: { userName?: string; displayName?: string }) => r.userName ?? r.displayName).sort();
  const find = (filter: string, resource = 'Users') => scim('GET', `/${resource}?filter=${encodeURIComponent(filter)}`);

  test('E26 reads a created user with every attribute; meta, ETag and Location are set; the password is never answered', async () => {
    const full = {
      externalId: 'ext-1',
      name: {
        formatted: 'Ms. Barbara J Jensen III',
        familyName: 'Jensen',
        givenName: 'Barbara',
        middleName: 'Jane',
        honorificPrefix: 'Ms.',
        honorificSuffix: 'III',
      },
      displayName: 'Babs Jensen',
      nickName: 'Babs',
      profileUrl: 'https://login.example.com/bjensen',
      title: 'Tour Guide',
      userType: 'Employee',
      preferredLanguage: 'en-US',
      locale: 'en-US',
      timezone: 'America/Los_Angeles',
      active: true,
      password: 't1meMa$heen',
      emails: [
        { value: 'bjensen@example.com', type: 'work', primary: true, display: 'work mail' },
        { value: 'babs@jensen.org', type: 'home' },
      ],
      addresses: [
        {
          type: 'work',
          streetAddress: '100 Universal City Plaza',
          locality: 'Hollywood',
          region: 'CA',
          postalCode: '91608',
          country: 'US',
          formatted: '100 Universal City Plaza\nHollywood, CA 91608 USA',
          primary: true,
          display: 'office',
        },
      ],
      phoneNumbers: [{ value: '555-555-5555', type: 'work' }],
      ims: [{ value: 'someaimhandle', type: 'aim' }],
      photos: [{ value: 'https://photos.example.com/profilephoto/72930000000Ccne/F', type: 'photo' }],
      entitlements: [{ value: 'reports', display: 'Reports' }],
      roles: [{ value: 'analyst', type: 'job', primary: false }],
      x509Certificates: [{ value: 'MIIDQzCCAqygAwIBAgICEAAwDQYJKoZIhvcNAQEFBQAwTjELMAkGA1UEBhMCVVMx' }],
    };
    const created = await scim('POST', '/Users', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      userName: 'bjensen@example.com',
      ...full,
    });
    assert.equal(created.status, 201, created.text);
    assert.ok(created.headers.get('content-type')?.startsWith(SCIM));
    const id = created.body.id;
    assert.match(id, /^[0-9a-f-]{36}$/);
    assert.equal(created.headers.get('location'), created.body.meta.location);
    assert.ok(created.body.meta.location.endsWith(`/dpc/v1${BASE}/Users/${id}`));
    assert.equal(created.headers.get('etag'), 'W/"1"');
    assert.equal(created.text.includes('t1meMa$heen'), false);
    assert.equal('password' in created.body, false);

    const read = await scim('GET', `/Users/${id}`);
    assert.equal(read.status, 200, read.text);
    assert.equal(read.headers.get('etag'), 'W/"1"');
    const { password: _password, ...expected } = full;
    assert.deepEqual(
      { ...read.body, meta: undefined },
      {
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
        id,
        userName: 'bjensen@example.com',
        ...expected,
        meta: undefined,
      },
    );
    assert.equal(read.body.meta.resourceType, 'User');
    assert.equal(read.body.meta.version, 'W/"1"');
    assert.equal(read.body.meta.created, read.body.meta.lastModified);
    assert.equal(read.text.includes('t1meMa$heen'), false);
    const stored = await server.db.selectFrom('scimUsers').select('passwordHash').where('id', '=', id).executeTakeFirstOrThrow();
    assert.match(stored.passwordHash!, /^scrypt\$/);
    // Nor in a list, nor when asked for by name.
    const listed = await scim(
      'GET',
      `/Users?attributes=password,userName&filter=${encodeURIComponent('userName eq "bjensen@example.com"')}`,
    );
    assert.equal(listed.text.includes('t1meMa$heen') || listed.text.includes('password'), false, listed.text);
    expectScimError(await scim('GET', '/Users/00000000-0000-0000-0000-000000000000'), 404);
  });
});
