import assert from 'node:assert/strict';
import { randomUUID as randomUuid } from 'node:crypto';
import { after, before, test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import SCIMMY from 'scimmy';
import { sql } from 'kysely';
import { filter as referenceFilter, parse as parseFilter } from 'scim2-parse-filter';
import { describeEachStore, expectProblem, TestServer, type Answer, type Caller } from '../helpers/harness.ts';

const SCIM = 'application/scim+json';
const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';
const PROBLEM = 'application/problem+json';
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

  test('directory-integration tokens: admins create (secret once), list and revoke; a token reaches only SCIM of its account', async () => {
    const created = await server.api('POST', '/directory-integration/tokens', { token: caller.token, body: { name: 'okta' } });
    assert.equal(created.status, 201, created.text);
    const { id, token: secret } = created.body;
    assert.match(secret, /^dpcdir_/);
    const row = await server.db.selectFrom('directoryTokens').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    assert.equal(JSON.stringify(row).includes(secret.split('.')[1]), false, 'the secret is not stored');
    const listed = await server.api('GET', '/directory-integration/tokens', { token: caller.token });
    assert.equal(listed.status, 200);
    assert.ok(listed.body.some((t: { id: string }) => t.id === id));
    assert.equal(listed.text.includes(secret), false);

    assert.equal((await scim('GET', '/Users', undefined, {}, secret)).status, 200);
    // Nothing but SCIM: not the account's projects, not the tokens.
    expectProblem(await server.api('GET', '/projects', { token: secret }), 403);
    expectProblem(await server.api('GET', '/directory-integration/tokens', { token: secret }), 403);
    expectProblem(await server.api('POST', '/directory-integration/tokens', { token: secret, body: { name: 'x' } }), 403);
    // Only admins manage tokens and reach SCIM; an admin's access token may call SCIM too.
    for (const role of ['viewer', 'developer'] as const) {
      const other = await server.tokenFor(caller.accountId, role);
      expectProblem(await server.api('GET', '/directory-integration/tokens', { token: other }), 403);
      expectProblem(await server.api('POST', '/directory-integration/tokens', { token: other, body: { name: 'x' } }), 403);
      expectScimError(await scim('GET', '/Users', undefined, {}, other), 403);
    }
    assert.equal((await scim('GET', '/Users', undefined, {}, caller.token)).status, 200);

    const revoked = await server.api('DELETE', `/directory-integration/tokens/${id}`, { token: caller.token });
    assert.equal(revoked.status, 200, revoked.text);
    assert.ok(revoked.body.revokedAt);
    expectScimError(await scim('GET', '/Users', undefined, {}, secret), 401);
    expectScimError(await scim('GET', '/Users', undefined, {}, `${secret.slice(0, -2)}xx`), 401);
    expectProblem(
      await server.api('DELETE', `/directory-integration/tokens/${crypto.randomUUID()}`, { token: caller.token }),
      404,
    );
    expectProblem(await server.api('POST', '/directory-integration/tokens', { token: caller.token, body: { name: '' } }), 400);
  });

  test('the OpenAPI document gives each SCIM failure in both forms, and a live SCIM error matches its ScimError', async () => {
    const document = (await server.request('GET', '/dpc/openapi.json')).body;
    const operations = Object.entries(document.paths as Record<string, Record<string, { responses: Record<string, any> }>>)
      .filter(([path]) => path.startsWith(`/dpc/v1${BASE}`))
      .flatMap(([, methods]) => Object.values(methods));
    assert.ok(operations.length >= 10);
    for (const { responses } of operations) {
      for (const [status, answer] of Object.entries(responses).filter(([status]) => Number(status) >= 400)) {
        assert.deepEqual(Object.keys(answer.content).sort(), ['application/problem+json', SCIM], status);
        assert.equal(answer.content[SCIM].schema.$ref, '#/components/schemas/ScimError');
      }
    }
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    const validate = ajv.compile(document.components.schemas.ScimError);
    const failure = await scim('PATCH', `/Groups/${crypto.randomUUID()}`, patchOf({ op: 'move', path: 'title' }));
    assert.ok(validate(failure.body), ajv.errorsText(validate.errors));
    assert.ok(!validate({ ...(failure.body as object), status: failure.status }), 'status is a string in SCIM');
  });

  test('errors: SCIM error schema unless the client asks for problem+json only (then with scimType)', async () => {
    const bad = `${BASE}/Users?filter=${encodeURIComponent('userName eq')}`;
    expectScimError(await server.api('GET', bad, { token, headers: { accept: SCIM } }), 400, 'invalidFilter');
    const problem = expectProblem(await server.api('GET', bad, { token, headers: { accept: PROBLEM } }), 400);
    assert.equal((problem as { scimType?: string }).scimType, 'invalidFilter');
    const missing = await server.api('POST', `${BASE}/Users`, { token, body: {}, headers: { accept: PROBLEM } });
    assert.equal(expectProblem(missing, 400).detail, 'userName is required.');
    expectScimError(await scim('POST', '/Users', { displayName: 'no user name' }), 400, 'invalidValue');
    expectScimError(await scim('POST', '/Users', { userName: ' ' }), 400, 'invalidValue');
    expectScimError(await scim('POST', '/Users', { userName: 'typed', active: 'yes' }), 400, 'invalidValue');
    expectScimError(await scim('POST', '/Users', { userName: 'typed', emails: { value: 'not a list' } }), 400, 'invalidValue');
    expectScimError(await scim('POST', '/Users', { userName: 'typed', name: 'not an object' }), 400, 'invalidValue');
    expectScimError(await scim('POST', '/Users', { userName: 'x'.repeat(513) }), 400, 'invalidValue');
    // A dotted key is not an attribute of a resource body (it is of a PATCH value): ignored.
    const dotted = await scim('POST', '/Users', { userName: 'dotted@example.com', 'name.givenName': 'Dot' });
    assert.equal(dotted.status, 201, dotted.text);
    assert.equal(dotted.body.givenName, undefined);
    assert.equal(dotted.body.name, undefined);
    // Sent as scim+json, answered as SCIM even without Accept.
    const sent = await server.api('POST', `${BASE}/Users`, {
      token,
      body: JSON.stringify({}),
      headers: { 'content-type': SCIM },
    });
    expectScimError(sent, 400, 'invalidValue');
    expectScimError(await scim('POST', '/Users', '{not json'), 400);
    const plain = await server.api('POST', `${BASE}/Users`, {
      token,
      body: 'userName',
      headers: { accept: SCIM, 'content-type': 'text/plain' },
    });
    expectScimError(plain, 415);
    expectScimError(await scim('GET', '/Users?count=many'), 400);
    expectProblem(await server.api('GET', `${BASE}/Users?count=many`, { token, headers: { accept: PROBLEM } }), 400);
    // Any other Accept (or none) gets the SCIM form.
    for (const accept of ['*/*', 'application/json', 'application/problem+json, */*']) {
      expectScimError(await server.api('GET', `${BASE}/Users?count=many`, { token, headers: { accept } }), 400);
    }
    expectScimError(await server.api('GET', `${BASE}/Users?count=many`, { token }), 400);
  });

  test('filters compile every operator, logic, parentheses and attribute paths, case-insensitively where the attribute is', async () => {
    const other = await server.newAccount('filters');
    const adminToken = other.token;
    const make = (userName: string, extra: Record<string, unknown>) => user(userName, extra, adminToken);
    await make('Alice@Example.com', {
      externalId: 'EXT-a',
      name: { familyName: 'Smith', givenName: 'Alice' },
      title: 'Engineer',
      active: true,
      emails: [
        { value: 'alice@work.example', type: 'work' },
        { value: 'alice@home.example', type: 'home' },
      ],
    });
    await make('bob@example.com', {
      externalId: 'ext-b',
      name: { familyName: 'Jones', givenName: 'Bob' },
      active: false,
      emails: [{ value: 'bob@home.example', type: 'work' }],
    });
    await make('carol@other.org', {
      name: { familyName: 'Smithers' },
      title: 'Manager',
      emails: [{ value: 'carol@work.example', type: 'home' }],
    });
    const query = async (filter: string) => {
      const answer = await scim('GET', `/Users?filter=${encodeURIComponent(filter)}`, undefined, {}, adminToken);
      assert.equal(answer.status, 200, `${filter}: ${answer.text}`);
      assert.deepEqual(answer.body.schemas, ['urn:ietf:params:scim:api:messages:2.0:ListResponse']);
      assert.equal(answer.body.totalResults, answer.body.Resources.length);
      return ids(answer);
    };
    const all = ['Alice@Example.com', 'bob@example.com', 'carol@other.org'];
    assert.deepEqual(await query('userName eq "alice@example.com"'), ['Alice@Example.com']);
    assert.deepEqual(await query('USERNAME Eq "ALICE@EXAMPLE.COM"'), ['Alice@Example.com']);
    assert.deepEqual(await query('userName ne "alice@example.com"'), ['bob@example.com', 'carol@other.org']);
    assert.deepEqual(await query('userName co "EXAMPLE"'), ['Alice@Example.com', 'bob@example.com']);
    assert.deepEqual(await query('userName sw "b"'), ['bob@example.com']);
    assert.deepEqual(await query('userName ew ".ORG"'), ['carol@other.org']);
    assert.deepEqual(await query('title pr'), ['Alice@Example.com', 'carol@other.org']);
    assert.deepEqual(await query('name.familyName sw "smith"'), ['Alice@Example.com', 'carol@other.org']);
    assert.deepEqual(await query('name.familyName eq "Smith"'), ['Alice@Example.com']);
    assert.deepEqual(await query('userName gt "b"'), ['bob@example.com', 'carol@other.org']);
    assert.deepEqual(await query('userName ge "bob@example.com"'), ['bob@example.com', 'carol@other.org']);
    assert.deepEqual(await query('userName lt "bob@example.com"'), ['Alice@Example.com']);
    assert.deepEqual(await query('userName le "bob@example.com"'), ['Alice@Example.com', 'bob@example.com']);
    // externalId is case-exact.
    assert.deepEqual(await query('externalId eq "EXT-a"'), ['Alice@Example.com']);
    assert.deepEqual(await query('externalId eq "ext-a"'), []);
    assert.deepEqual(await query('active eq true'), ['Alice@Example.com']);
    assert.deepEqual(await query('active eq false'), ['bob@example.com']);
    // Logic and parentheses.
    assert.deepEqual(await query('title eq "engineer" or active eq false'), ['Alice@Example.com', 'bob@example.com']);
    assert.deepEqual(await query('name.familyName sw "smith" and not (title eq "manager")'), ['Alice@Example.com']);
    assert.deepEqual(await query('(userName sw "a" or userName sw "c") and title pr and not (active eq true)'), [
      'carol@other.org',
    ]);
    // Multi-valued attributes: any value, or one value meeting the whole value filter.
    assert.deepEqual(await query('emails co "home.example"'), ['Alice@Example.com', 'bob@example.com']);
    assert.deepEqual(await query('emails.value ew "@work.example"'), ['Alice@Example.com', 'carol@other.org']);
    assert.deepEqual(await query('emails[type eq "work" and value co "home"]'), ['bob@example.com']);
    assert.deepEqual(await query('emails[type eq "work"].value co "work.example"'), ['Alice@Example.com']);
    assert.deepEqual(await query('emails[type eq "home"].value co "work.example"'), ['carol@other.org']);
    assert.deepEqual(await query('emails[not (type eq "work")]'), ['Alice@Example.com', 'carol@other.org']);
    assert.deepEqual(await query('emails[type eq "work" or value sw "carol"]'), all);
    // Dates: meta.created and meta.lastModified, against any RFC 3339 spelling.
    assert.deepEqual(await query('meta.created gt "2000-01-01T00:00:00Z"'), all);
    assert.deepEqual(await query('meta.lastModified lt "2000-01-01T00:00:00+01:00"'), []);
    assert.deepEqual(await query('meta.created ge "2000-01-01T00:00:00Z" and meta.created le "2999-01-01T00:00:00Z"'), all);
    assert.deepEqual(await query('meta.created eq "2000-01-01T00:00:00Z"'), []);
    assert.deepEqual(await query('urn:ietf:params:scim:schemas:core:2.0:User:userName eq "bob@example.com"'), [
      'bob@example.com',
    ]);

    for (const bad of [
      'userName eq',
      'userName xx "a"',
      'nope eq "a"',
      'password eq "x"',
      'active gt true',
      'meta.created gt "yesterday"',
      'name eq "x"',
      'emails[value eq "a"',
      'meta.version eq "x"',
      'x509Certificates.value pr',
      '',
    ]) {
      const answer = await scim('GET', `/Users?filter=${encodeURIComponent(bad)}`, undefined, {}, adminToken);
      assert.equal(expectScimError(answer, 400).scimType, 'invalidFilter', bad);
    }
  });

  test('lists page with startIndex/count, sort with sortBy/sortOrder, and answer the attributes asked for', async () => {
    const other = await server.newAccount('paging');
    const names = ['delta', 'alpha', 'echo', 'charlie', 'bravo'];
    for (const name of names)
      await user(`${name}@example.com`, { displayName: name.toUpperCase(), name: { givenName: name } }, other.token);
    const list = (q: string) => scim('GET', `/Users?${q}`, undefined, {}, other.token);
    const page = await list('sortBy=userName&startIndex=2&count=2');
    assert.equal(page.body.totalResults, 5);
    assert.equal(page.body.startIndex, 2);
    assert.equal(page.body.itemsPerPage, 2);
    assert.deepEqual(
      page.body.Resources.map((r: { userName: string }) => r.userName),
      ['bravo@example.com', 'charlie@example.com'],
    );
    const descending = await list('sortBy=displayName&sortOrder=descending&count=3');
    assert.deepEqual(
      descending.body.Resources.map((r: { displayName: string }) => r.displayName),
      ['ECHO', 'DELTA', 'CHARLIE'],
    );
    const counted = await list('count=0');
    assert.deepEqual([counted.body.totalResults, counted.body.Resources], [5, []]);
    const beyond = await list('startIndex=0&count=100&sortBy=meta.created');
    assert.equal(beyond.body.startIndex, 1);
    assert.equal(beyond.body.Resources.length, 5);
    const picked = await list('attributes=userName,name.givenName&sortBy=userName&count=1');
    assert.deepEqual(picked.body.Resources[0], {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      id: picked.body.Resources[0].id,
      userName: 'alpha@example.com',
      name: { givenName: 'alpha' },
    });
    const trimmed = await list('excludedAttributes=name,meta,displayName&sortBy=userName&count=1');
    assert.deepEqual(Object.keys(trimmed.body.Resources[0]).sort(), ['id', 'schemas', 'userName']);
    const one = await scim('GET', `/Users/${picked.body.Resources[0].id}?attributes=displayName`, undefined, {}, other.token);
    assert.deepEqual(Object.keys(one.body).sort(), ['displayName', 'id', 'schemas']);
    expectScimError(await list('sortBy=nothing'), 400);
    expectScimError(await list('attributes=nothing'), 400, 'invalidPath');
  });

  test('co, sw and ew "" match every value of the attribute, on both stores as in the evaluator and in PATCH member filters', async () => {
    const other = await server.newAccount('empty operands');
    await user('ada@x.example', { title: 'countess' }, other.token);
    await user('bob@y.example', {}, other.token);
    const resources = (await scim('GET', '/Users', undefined, {}, other.token)).body.Resources;
    for (const text of [
      'userName ew ""',
      'userName sw ""',
      'userName co ""',
      'title ew ""',
      'title sw ""',
      'title co ""',
      'not (title ew "")',
      'userName ew "" and userName eq "ada@x.example"',
    ]) {
      const expected = resources
        .filter(referenceFilter(parseFilter(text)))
        .map((r: { userName: string }) => r.userName)
        .sort();
      const answer = await scim('GET', `/Users?filter=${encodeURIComponent(text)}`, undefined, {}, other.token);
      assert.equal(answer.status, 200, answer.text);
      assert.deepEqual(ids(answer), expected, text);
    }
    assert.equal(
      (await scim('GET', `/Users?filter=${encodeURIComponent('userName ew ""')}`, undefined, {}, other.token)).body.totalResults,
      2,
    );
    // The same comparison in a PATCH path's member filter: every member's value ends with "".
    const members = resources.map((r: { id: string }) => ({ value: r.id }));
    const created = await scim('POST', '/Groups', { displayName: 'empty', members }, {}, other.token);
    const patched = await scim(
      'PATCH',
      `/Groups/${created.body.id}`,
      patchOf({ op: 'remove', path: 'members[value ew ""]' }),
      {},
      other.token,
    );
    assert.equal(patched.status, 200, patched.text);
    assert.deepEqual(patched.body.members, []);
  });

  test("filters and sortBy on a group's derived fields (accountId, accountName, projectName) are 400; projectId works", async () => {
    const other = await server.newAccount('derived fields');
    const projectId = await server.newProject(other, 'Derived');
    const made = await scim('POST', '/Groups', { displayName: 'derived', projectId, role: 'viewer' }, {}, other.token);
    assert.equal(made.status, 201, made.text);
    assert.equal(made.body[GROUP_EXTENSION].accountId, other.accountId);
    assert.equal(made.body.accountId, undefined, 'extension attributes only in their extension object');
    const groups = (query: string) => scim('GET', `/Groups?${query}`, undefined, {}, other.token);
    for (const bad of [
      `accountId eq "${other.accountId}"`,
      'accountName pr',
      'projectName eq "Derived"',
      `${GROUP_EXTENSION}:accountId eq "${other.accountId}"`,
      'displayName eq "derived" or not (projectName pr)',
    ]) {
      expectScimError(await groups(`filter=${encodeURIComponent(bad)}`), 400, 'invalidFilter');
    }
    for (const attribute of ['accountId', 'accountName', 'projectName', `${GROUP_EXTENSION}:projectName`]) {
      expectScimError(await groups(`sortBy=${encodeURIComponent(attribute)}`), 400, 'invalidValue');
    }
    assert.deepEqual(ids(await groups(`filter=${encodeURIComponent(`projectId eq "${projectId}"`)}`)), ['derived']);
    assert.equal((await groups('sortBy=projectId')).status, 200);
  });

  test('pr on a multi-valued complex attribute matches any value, with or without its value sub-attribute', async () => {
    const other = await server.newAccount('present');
    await user('novalue@example.com', { emails: [{ type: 'work', display: 'Work' }] }, other.token);
    await user('withvalue@example.com', { emails: [{ value: 'a@x.example' }] }, other.token);
    await user('none@example.com', {}, other.token);
    const resources = (await scim('GET', '/Users', undefined, {}, other.token)).body.Resources;
    const query = async (text: string) => {
      const answer = await scim('GET', `/Users?filter=${encodeURIComponent(text)}`, undefined, {}, other.token);
      assert.equal(answer.status, 200, answer.text);
      return ids(answer);
    };
    assert.deepEqual(await query('emails pr'), ['novalue@example.com', 'withvalue@example.com']);
    assert.deepEqual(await query('not (emails pr)'), ['none@example.com']);
    assert.deepEqual(await query('emails eq null'), ['none@example.com']);
    assert.deepEqual(await query('emails.value pr'), ['withvalue@example.com']);
    assert.deepEqual(await query('emails[type pr]'), ['novalue@example.com']);
    for (const text of ['emails pr', 'not (emails pr)', 'emails.value pr']) {
      const expected = resources
        .filter(referenceFilter(parseFilter(text)))
        .map((r: { userName: string }) => r.userName)
        .sort();
      assert.deepEqual(await query(text), expected, text);
    }
  });

  test('sortBy a multi-valued attribute sorts by its primary value, else its first (RFC 7644 3.4.2.3)', async () => {
    const other = await server.newAccount('sorting values');
    // Primary-else-first keys: z, m, c, none. The least values would be a, b, c.
    await user('one@example.com', { emails: [{ value: 'a@x.example' }, { value: 'z@x.example', primary: true }] }, other.token);
    await user('two@example.com', { emails: [{ value: 'm@x.example' }, { value: 'b@x.example' }] }, other.token);
    await user('three@example.com', { emails: [{ value: 'c@x.example', primary: false }] }, other.token);
    await user('four@example.com', {}, other.token);
    const sorted = async (query: string) => {
      const answer = await scim('GET', `/Users?${query}`, undefined, {}, other.token);
      assert.equal(answer.status, 200, answer.text);
      return answer.body.Resources.map((r: { userName: string }) => r.userName.split('@')[0]);
    };
    assert.deepEqual(await sorted('sortBy=emails.value'), ['three', 'two', 'one', 'four']);
    assert.deepEqual(await sorted('sortBy=emails&sortOrder=descending'), ['one', 'two', 'three', 'four']);
    // The primary element without the sorted sub-attribute: the first element that has it.
    await user(
      'five@example.com',
      {
        emails: [
          { value: 'b@x.example', type: 'home' },
          { value: 'y@x.example', primary: true },
        ],
      },
      other.token,
    );
    assert.deepEqual(await sorted('sortBy=emails.type&count=1'), ['five']);
    assert.deepEqual(await sorted('sortBy=emails.value&count=2'), ['three', 'two']);
  });

  test('date-times in filters: RFC 3339 only (any offset, fractional seconds optional), compared as instants', async () => {
    const other = await server.newAccount('date filters');
    const first = await user('first@example.com', {}, other.token);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await user('second@example.com', {}, other.token);
    const query = async (text: string) => {
      const answer = await scim('GET', `/Users?filter=${encodeURIComponent(text)}`, undefined, {}, other.token);
      assert.equal(answer.status, 200, `${text}: ${answer.text}`);
      return ids(answer);
    };
    const both = ['first@example.com', 'second@example.com'];
    const created: string = first.meta.created;
    const ms = Date.parse(created);
    // The same instant in other spellings: another offset, lower-case t and z, more digits.
    const shifted = new Date(ms + 330 * 60_000).toISOString().replace('Z', '+05:30');
    for (const spelling of [created, shifted, created.toLowerCase(), created.replace('Z', '000Z')]) {
      assert.deepEqual(await query(`meta.created eq "${spelling}"`), ['first@example.com'], spelling);
    }
    const seconds = created.replace(/\.\d+Z$/, 'Z');
    if (seconds !== created) assert.deepEqual(await query(`meta.created eq "${seconds}"`), []);
    // A hundred nanoseconds after the first user's creation: after it, and equal to no stored time.
    const later = created.replace('Z', '0001Z');
    assert.deepEqual(await query(`meta.created eq "${later}"`), []);
    assert.deepEqual(await query(`meta.created ge "${later}"`), ['second@example.com']);
    assert.deepEqual(await query(`meta.created gt "${later}"`), ['second@example.com']);
    assert.deepEqual(await query(`meta.created le "${later}"`), ['first@example.com']);
    assert.deepEqual(await query(`meta.created lt "${later}"`), ['first@example.com']);
    assert.deepEqual(await query(`not (meta.created eq "${later}")`), both);
    // Instants beyond the years ISO text holds in order, and leap seconds.
    assert.deepEqual(await query('meta.created lt "9999-12-31T23:30:00-01:00"'), both);
    assert.deepEqual(await query('meta.created gt "9999-12-31T23:30:00-01:00"'), []);
    assert.deepEqual(await query('meta.created gt "0000-01-01T00:00:00+01:00"'), both);
    assert.deepEqual(await query('meta.created le "0000-01-01T00:00:00+01:00"'), []);
    assert.deepEqual(await query('meta.created gt "2016-12-31T23:59:60Z"'), both);
    assert.deepEqual(await query('meta.lastModified lt "1990-12-31T15:59:60.5-08:00"'), []);
    assert.deepEqual(await query('meta.created gt "2000-02-29T00:00:00Z"'), both);
    for (const bad of [
      '1',
      'March 7 2000',
      '2000-01-01',
      '2000-01-01T00:00:00',
      '2000-01-01 00:00:00Z',
      '2000-1-01T00:00:00Z',
      '2000-02-30T00:00:00Z',
      '1900-02-29T00:00:00Z',
      '2000-01-01T24:00:00Z',
      '2000-01-01T00:00:00+24:00',
      '2000-01-01T12:00:60Z',
      '+010000-01-01T00:00:00Z',
      ' 2000-01-01T00:00:00Z',
      '2000-01-01T00:00:00.Z',
    ]) {
      const answer = await scim(
        'GET',
        `/Users?filter=${encodeURIComponent(`meta.created lt "${bad}"`)}`,
        undefined,
        {},
        other.token,
      );
      expectScimError(answer, 400, 'invalidFilter');
    }
  });

  test('attributes and excludedAttributes refuse unknown or too deep sub-attributes and accept schemas; sortBy failures are invalidValue', async () => {
    const other = await server.newAccount('selection');
    const made = await user(
      'pick@example.com',
      { name: { givenName: 'Pick' }, emails: [{ value: 'p@x.example', type: 'work' }] },
      other.token,
    );
    const get = (query: string) => scim('GET', `/Users?${query}`, undefined, {}, other.token);
    for (const query of [
      'attributes=emails.nope',
      'excludedAttributes=emails.nope',
      'attributes=name.givenName.x',
      'excludedAttributes=name.givenName.x',
      'attributes=userName.x',
      'attributes=userName,schemas.x',
    ]) {
      expectScimError(await get(query), 400, 'invalidPath');
    }
    expectScimError(
      await scim('GET', `/Users/${made.id}?attributes=emails.nope`, undefined, {}, other.token),
      400,
      'invalidPath',
    );
    const excluded = await get('excludedAttributes=id,schemas,userName');
    assert.equal(excluded.status, 200, excluded.text);
    assert.deepEqual(Object.keys(excluded.body.Resources[0]).sort(), ['emails', 'id', 'meta', 'name', 'schemas']);
    const picked = await get('attributes=schemas,id,emails.type');
    assert.equal(picked.status, 200, picked.text);
    assert.deepEqual(picked.body.Resources[0], {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      id: made.id,
      emails: [{ type: 'work' }],
    });
    for (const sortBy of ['nothing', 'password', 'meta.version', 'meta.location', 'name', 'groups', 'x509Certificates.value']) {
      const error = expectScimError(await get(`sortBy=${sortBy}`), 400, 'invalidValue');
      assert.doesNotMatch(error.detail, /filter/, sortBy);
    }
    expectScimError(await scim('GET', '/Groups?sortBy=members', undefined, {}, other.token), 400, 'invalidValue');
  });

  test('POST /.search takes the list parameters as a SearchRequest body and answers as the list does', async () => {
    const other = await server.newAccount('searching');
    for (const name of ['kilo', 'lima', 'mike', 'kite'])
      await user(`${name}@example.com`, { name: { givenName: name }, title: 'pilot' }, other.token);
    await scim(
      'POST',
      '/Groups',
      { schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'], displayName: 'pilots' },
      {},
      other.token,
    );
    const search = (body: unknown, resource = 'Users') => scim('POST', `/${resource}/.search`, body, {}, other.token);
    const SEARCH = 'urn:ietf:params:scim:api:messages:2.0:SearchRequest';
    const found = await search({
      schemas: [SEARCH],
      filter: 'userName sw "k"',
      sortBy: 'userName',
      sortOrder: 'descending',
      startIndex: 1,
      count: 1,
      attributes: ['userName', 'name.givenName'],
    });
    assert.equal(found.status, 200, found.text);
    assert.ok(found.headers.get('content-type')?.startsWith(SCIM));
    assert.deepEqual(found.body.schemas, ['urn:ietf:params:scim:api:messages:2.0:ListResponse']);
    assert.deepEqual([found.body.totalResults, found.body.startIndex, found.body.itemsPerPage], [2, 1, 1]);
    assert.deepEqual(found.body.Resources[0], {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      id: found.body.Resources[0].id,
      userName: 'kite@example.com',
      name: { givenName: 'kite' },
    });
    // The same query as GET answers the same list.
    const listed = await scim(
      'GET',
      `/Users?filter=${encodeURIComponent('userName sw "k"')}&sortBy=userName&sortOrder=descending&count=1&attributes=userName,name.givenName`,
      undefined,
      {},
      other.token,
    );
    assert.deepEqual(listed.body, found.body);
    // Member names are case-insensitive, as SCIM's are; excludedAttributes is an array too.
    const loose = await search({ SCHEMAS: [SEARCH], Filter: 'title eq "pilot"', excludedattributes: ['name', 'meta', 'title'] });
    assert.equal(loose.status, 200, loose.text);
    assert.equal(loose.body.totalResults, 4);
    assert.deepEqual(Object.keys(loose.body.Resources[0]).sort(), ['id', 'schemas', 'userName']);
    const groups = await search({ schemas: [SEARCH], filter: 'displayName eq "pilots"' }, 'Groups');
    assert.deepEqual(ids(groups), ['pilots']);
    // Malformed: no SearchRequest schema, wrong types; a bad filter as in a GET.
    for (const body of [
      { filter: 'title eq "pilot"' },
      { schemas: [PATCH_OP] },
      { schemas: [SEARCH], startIndex: 'first' },
      { schemas: [SEARCH], attributes: 'userName' },
      { schemas: [SEARCH], count: 'ten' },
    ]) {
      const error = expectScimError(await search(body), 400, 'invalidSyntax');
      assert.match(error.detail, /body/, error.detail);
    }
    expectScimError(await search({ schemas: [SEARCH], filter: 'title zz "pilot"' }), 400, 'invalidFilter');
    // problem+json callers get the violations as a list, with the scimType.
    const plain = await server.api('POST', `${BASE}/Users/.search`, {
      token: other.token,
      body: { schemas: [] },
      headers: { accept: PROBLEM },
    });
    expectProblem(plain, 400);
    assert.equal(plain.body.scimType, 'invalidSyntax');
    assert.ok(
      plain.body.violations.some((v: string) => v.startsWith('body.schemas')),
      plain.text,
    );
  });

  test('userName is unique case-insensitively: 409 uniqueness on create, replace and patch', async () => {
    const first = await user('Unique.Person@example.com');
    expectScimError(await scim('POST', '/Users', { userName: 'unique.person@EXAMPLE.com' }), 409, 'uniqueness');
    const second = await user('second.person@example.com');
    expectScimError(await scim('PUT', `/Users/${second.id}`, { userName: 'UNIQUE.PERSON@example.com' }), 409, 'uniqueness');
    expectScimError(
      await scim(
        'PATCH',
        `/Users/${second.id}`,
        patchOf({ op: 'replace', path: 'userName', value: 'unique.person@example.com' }),
      ),
      409,
      'uniqueness',
    );
    // The same user may change the case of its own userName.
    const renamed = await scim(
      'PATCH',
      `/Users/${first.id}`,
      patchOf({ op: 'replace', path: 'userName', value: 'unique.person@example.com' }),
    );
    assert.equal(renamed.status, 200, renamed.text);
    assert.equal(renamed.body.userName, 'unique.person@example.com');
  });

  test('PUT replaces a user; PATCH applies add, remove and replace with and without paths and value filters', async () => {
    const created = await user('patch.me@example.com', {
      name: { givenName: 'Pat', familyName: 'Me' },
      emails: [{ value: 'pat@work.example', type: 'work', primary: true }],
      title: 'Intern',
      password: 'first secret',
    });
    const path = `/Users/${created.id}`;
    const patch = async (...operations: unknown[]) => {
      const answer = await scim('PATCH', path, patchOf(...operations));
      assert.equal(answer.status, 200, answer.text);
      assert.equal(answer.text.includes('secret'), false);
      return answer.body;
    };
    let body = await patch({ op: 'replace', value: { active: false, 'name.givenName': 'Patricia', id: 'ignored' } });
    assert.equal(body.active, false);
    assert.equal(body.name.givenName, 'Patricia');
    assert.equal(body.id, created.id);
    body = await patch({ op: 'Replace', path: 'active', value: 'True' });
    assert.equal(body.active, true);
    body = await patch({ op: 'REPLACE', path: 'emails[type eq "work"].value', value: 'patricia@work.example' });
    assert.deepEqual(body.emails, [{ value: 'patricia@work.example', type: 'work', primary: true }]);
    body = await patch({
      op: 'add',
      path: 'emails',
      value: [
        { value: 'pat@home.example', type: 'home' },
        { value: 'patricia@work.example', type: 'work', primary: true },
      ],
    });
    assert.equal(body.emails.length, 2, 'a value already there is not added twice');
    body = await patch({ op: 'replace', path: 'phoneNumbers[type eq "mobile"].value', value: '+1 555 0100' });
    assert.deepEqual(
      body.phoneNumbers,
      [{ type: 'mobile', value: '+1 555 0100' }],
      'a value filter of equalities names the value to create',
    );
    body = await patch(
      { op: 'remove', path: 'emails[type eq "home"]' },
      { op: 'remove', path: 'title' },
      { op: 'add', path: 'name', value: { middleName: 'Q' } },
    );
    assert.deepEqual(
      body.emails.map((e: { type: string }) => e.type),
      ['work'],
    );
    assert.equal(body.title, undefined);
    assert.deepEqual(body.name, { givenName: 'Patricia', familyName: 'Me', middleName: 'Q' });
    body = await patch(
      { op: 'remove', path: 'name.middleName' },
      { op: 'add', path: 'urn:ietf:params:scim:schemas:core:2.0:User:nickName', value: 'Trish' },
    );
    assert.equal(body.name.middleName, undefined);
    assert.equal(body.nickName, 'Trish');
    // Another schema's attribute (Entra's enterprise extension) is ignored, not refused.
    body = await patch({
      op: 'add',
      path: 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department',
      value: 'R&D',
    });
    assert.equal(body.meta.version, 'W/"8"', 'a PATCH that changed nothing leaves the version');
    // The password is replaced (hash changes) and never answered.
    const before = await server.db
      .selectFrom('scimUsers')
      .select('passwordHash')
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    await patch({ op: 'replace', path: 'password', value: 'second secret' });
    const afterPatch = await server.db
      .selectFrom('scimUsers')
      .select('passwordHash')
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    assert.notEqual(afterPatch.passwordHash, before.passwordHash);

    const replaced = await scim('PUT', path, { userName: 'patch.me@example.com', displayName: 'Only this' });
    assert.equal(replaced.status, 200, replaced.text);
    assert.deepEqual(Object.keys(replaced.body).sort(), ['displayName', 'id', 'meta', 'schemas', 'userName']);
    assert.equal(replaced.body.meta.created, created.meta.created);
    const kept = await server.db
      .selectFrom('scimUsers')
      .select('passwordHash')
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    assert.equal(kept.passwordHash, afterPatch.passwordHash, 'PUT without a password keeps it');
    expectScimError(await scim('PUT', '/Users/00000000-0000-0000-0000-000000000000', { userName: 'x' }), 404);
  });

  test('PATCH failures: each scimType, and one bad operation leaves the resource unchanged', async () => {
    const created = await user('atomic@example.com', { title: 'Before', emails: [{ value: 'a@work.example', type: 'work' }] });
    const path = `/Users/${created.id}`;
    const cases: [unknown, string][] = [
      [{ Operations: [{ op: 'add', path: 'title', value: 'x' }] }, 'invalidSyntax'],
      [
        { schemas: ['urn:ietf:params:scim:api:messages:2.0:Nope'], Operations: [{ op: 'add', path: 'title', value: 'x' }] },
        'invalidSyntax',
      ],
      [patchOf(), 'invalidSyntax'],
      [patchOf({ op: 'move', path: 'title', value: 'x' }), 'invalidSyntax'],
      [patchOf({ op: 'remove' }), 'noTarget'],
      [patchOf({ op: 'replace', path: 'emails[value co "nothing"].type', value: 'home' }), 'noTarget'],
      [patchOf({ op: 'replace', path: 'nothing', value: 'x' }), 'invalidPath'],
      [patchOf({ op: 'replace', path: 'name.nothing', value: 'x' }), 'invalidPath'],
      [patchOf({ op: 'replace', path: 'title[value eq "x"]', value: 'x' }), 'invalidPath'],
      [patchOf({ op: 'replace', path: 'emails[type eq]', value: 'x' }), 'invalidFilter'],
      [patchOf({ op: 'replace', path: 'active', value: 'maybe' }), 'invalidValue'],
      [patchOf({ op: 'replace', path: 'emails', value: 'not a list' }), 'invalidValue'],
      [patchOf({ op: 'replace', path: 'id', value: 'mine' }), 'mutability'],
      [patchOf({ op: 'add', path: 'groups', value: [{ value: 'x' }] }), 'mutability'],
      [patchOf({ op: 'remove', path: 'userName' }), 'invalidValue'],
    ];
    for (const [body, scimType] of cases) {
      const answer = await scim('PATCH', path, body);
      assert.equal(expectScimError(answer, 400).scimType, scimType, JSON.stringify(body));
    }
    // Good operations first, a bad one last: nothing changes.
    const answer = await scim(
      'PATCH',
      path,
      patchOf(
        { op: 'replace', path: 'title', value: 'After' },
        { op: 'add', path: 'nickName', value: 'n' },
        { op: 'replace', path: 'active', value: 42 },
      ),
    );
    expectScimError(answer, 400, 'invalidValue');
    const read = await scim('GET', path);
    assert.equal(read.body.title, 'Before');
    assert.equal(read.body.nickName, undefined);
    assert.equal(read.body.meta.version, 'W/"1"');
  });

  test('ETags: If-Match with another version is 412 for PUT, PATCH and DELETE; If-None-Match answers 304', async () => {
    const created = await user('etag@example.com');
    const path = `/Users/${created.id}`;
    const stale = { 'if-match': 'W/"7"' };
    expectScimError(await scim('PUT', path, { userName: 'etag@example.com', title: 'x' }, stale), 412);
    expectScimError(await scim('PATCH', path, patchOf({ op: 'add', path: 'title', value: 'x' }), stale), 412);
    expectScimError(await scim('DELETE', path, undefined, stale), 412);
    const patched = await scim('PATCH', path, patchOf({ op: 'add', path: 'title', value: 'x' }), { 'if-match': 'W/"1"' });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.headers.get('etag'), 'W/"2"');
    expectScimError(await scim('PATCH', path, patchOf({ op: 'add', path: 'title', value: 'y' }), { 'if-match': 'W/"1"' }), 412);
    assert.equal((await scim('GET', path, undefined, { 'if-none-match': 'W/"2"' })).status, 304);
    assert.equal((await scim('GET', path, undefined, { 'if-none-match': 'W/"1"' })).status, 200);
    assert.equal((await scim('PUT', path, { userName: 'etag@example.com' }, { 'if-match': '*' })).status, 200);
    assert.equal((await scim('DELETE', path, undefined, { 'if-match': 'W/"3"' })).status, 204);
    expectScimError(await scim('GET', path), 404);
    expectScimError(await scim('DELETE', path), 404);
  });

  test('versions follow what an answer shows: members, their names and groups; a write that changes nothing keeps it', async () => {
    const [ann, ben] = [await user('v.ann@example.com', { displayName: 'Ann' }), await user('v.ben@example.com')];
    const made = await group('Versioned', { members: [{ value: ann.id }] });
    const path = `/Groups/${made.id}`;
    const versionOf = async (resource: string) => (await scim('GET', resource)).headers.get('etag');
    const unchanged = async (resource: string, etag: string | null) =>
      assert.equal((await scim('GET', resource, undefined, { 'if-none-match': etag! })).status, 304, resource);
    // A member's display name changes the group's answer: a new version, no 304 for the old one.
    let groupTag = await versionOf(path);
    await scim('PATCH', `/Users/${ann.id}`, patchOf({ op: 'replace', path: 'displayName', value: 'Annie' }));
    assert.notEqual(await versionOf(path), groupTag);
    assert.equal((await scim('GET', path, undefined, { 'if-none-match': groupTag! })).status, 200);
    // A change a member's answer does not show (title) leaves the group alone.
    groupTag = await versionOf(path);
    await scim('PATCH', `/Users/${ann.id}`, patchOf({ op: 'replace', path: 'title', value: 'Lead' }));
    await unchanged(path, groupTag);
    // Joining and leaving change the user's groups: its version moves; the group's too.
    let benTag = await versionOf(`/Users/${ben.id}`);
    const joined = await scim('PATCH', path, patchOf({ op: 'add', path: 'members', value: [{ value: ben.id }] }));
    assert.notEqual(joined.headers.get('etag'), groupTag);
    assert.notEqual(await versionOf(`/Users/${ben.id}`), benTag);
    // Adding a member already there, removing one not there, replacing a value with itself: nothing moves.
    groupTag = joined.headers.get('etag');
    benTag = await versionOf(`/Users/${ben.id}`);
    for (const operation of [
      { op: 'add', path: 'members', value: [{ value: ben.id }] },
      { op: 'remove', path: `members[value eq "${randomUuid()}"]` },
      { op: 'replace', path: 'displayName', value: 'Versioned' },
    ]) {
      const same = await scim('PATCH', path, patchOf(operation));
      assert.equal(same.status, 200, same.text);
      assert.equal(same.headers.get('etag'), groupTag, JSON.stringify(operation));
      assert.equal(same.body.meta.lastModified, joined.body.meta.lastModified);
    }
    await unchanged(`/Users/${ben.id}`, benTag);
    // Adding and removing one user in one request leaves the members, and every version, as they were.
    const [carl] = [await user('v.carl@example.com')];
    const carlTag = await versionOf(`/Users/${carl.id}`);
    const net = await scim(
      'PATCH',
      path,
      patchOf(
        { op: 'add', path: 'members', value: [{ value: carl.id }] },
        { op: 'remove', path: `members[value eq "${carl.id}"]` },
      ),
    );
    assert.equal(net.headers.get('etag'), groupTag);
    await unchanged(`/Users/${carl.id}`, carlTag);
    const put = await scim('PUT', path, { displayName: 'Versioned', members: [{ value: ann.id }, { value: ben.id }] });
    assert.equal(put.headers.get('etag'), groupTag, 'a PUT of the same group changes nothing');
    // Renaming the group changes its members' groups.display.
    await scim('PATCH', path, patchOf({ op: 'replace', path: 'displayName', value: 'Renamed' }));
    assert.notEqual(await versionOf(`/Users/${ben.id}`), benTag);
    assert.equal((await scim('GET', `/Users/${ben.id}`)).body.groups[0].display, 'Renamed');
    // Deleting a member changes the group; deleting the group changes its remaining members.
    groupTag = await versionOf(path);
    assert.equal((await scim('DELETE', `/Users/${ann.id}`)).status, 204);
    assert.notEqual(await versionOf(path), groupTag);
    assert.deepEqual(
      (await scim('GET', path)).body.members.map((m: { value: string }) => m.value),
      [ben.id],
    );
    benTag = await versionOf(`/Users/${ben.id}`);
    assert.equal((await scim('DELETE', path)).status, 204);
    assert.notEqual(await versionOf(`/Users/${ben.id}`), benTag);
    assert.equal((await scim('GET', `/Users/${ben.id}`)).body.groups, undefined);
  });

  test('a GET answered back as PUT changes nothing; odd but valid inputs are taken, unclear ones refused', async () => {
    const made = await user('roundtrip@example.com', {
      externalId: 'ext-1',
      name: { givenName: 'Round', familyName: 'Trip' },
      emails: [{ value: 'rt@example.com', type: 'work' }],
    });
    const path = `/Users/${made.id}`;
    const read = await scim('GET', path);
    const put = await scim('PUT', path, read.body);
    assert.equal(put.headers.get('etag'), read.headers.get('etag'), 'a GET sent back as PUT');
    const reordered = await scim('PUT', path, {
      ...read.body,
      name: { familyName: 'Trip', givenName: 'Round' },
      emails: [{ type: 'work', value: 'rt@example.com' }],
    });
    assert.equal(reordered.headers.get('etag'), read.headers.get('etag'), 'keys in another order');
    const noPassword = await scim('PATCH', path, patchOf({ op: 'remove', path: 'password' }));
    assert.equal(noPassword.headers.get('etag'), read.headers.get('etag'), 'removing a password never set');
    // Adding a value that is there, now as primary, makes it primary rather than adding a copy.
    const primary = await scim(
      'PATCH',
      path,
      patchOf({ op: 'add', path: 'emails', value: [{ value: 'RT@example.com', type: 'work', primary: true }] }),
    );
    assert.deepEqual(primary.body.emails, [{ value: 'rt@example.com', type: 'work', primary: true }]);
    // A create that does not ask to see meta still answers its Location.
    for (const query of ['attributes=userName', 'excludedAttributes=meta']) {
      const created = await scim('POST', `/Users?${query}`, { userName: `located.${query.length}@example.com` });
      assert.equal(created.status, 201, created.text);
      assert.equal(created.body.meta, undefined);
      assert.match(created.headers.get('location') ?? '', new RegExp(`/Users/${created.body.id}$`));
    }
    const groupCreated = await scim('POST', '/Groups?attributes=displayName', { displayName: 'Located' });
    assert.match(groupCreated.headers.get('location') ?? '', new RegExp(`/Groups/${groupCreated.body.id}$`));
    // A null extension object is an unassigned one.
    const nulled = await scim('PUT', `/Groups/${groupCreated.body.id}`, { displayName: 'Located', [GROUP_EXTENSION]: null });
    assert.equal(nulled.status, 200, nulled.text);
    // Refused: a bare schema URN as a PATCH path, a URN prefix naming another schema's attribute, a bad
    // excludedAttributes beside attributes, a SearchRequest member given twice.
    expectScimError(
      await scim(
        'PATCH',
        `/Groups/${groupCreated.body.id}`,
        patchOf({ op: 'replace', path: GROUP_EXTENSION, value: { role: 'admin' } }),
      ),
      400,
      'invalidPath',
    );
    expectScimError(await find(`${GROUP_EXTENSION}:displayName eq "Located"`, 'Groups'), 400, 'invalidFilter');
    expectScimError(await scim('GET', '/Users?attributes=userName&excludedAttributes=bogus'), 400, 'invalidPath');
    const SEARCH = 'urn:ietf:params:scim:api:messages:2.0:SearchRequest';
    expectScimError(
      await scim('POST', '/Users/.search', { schemas: [SEARCH], filter: 'userName eq "nobody"', FILTER: 'id pr' }),
      400,
      'invalidSyntax',
    );
    const far = await scim('POST', '/Users/.search', { schemas: [SEARCH], startIndex: 1e300 });
    assert.match(far.text, /"startIndex":9007199254740991/);
  });

  test('writes to a user and its groups at once: every change moves the version, none is refused or lost', async () => {
    const person = await user('busy@example.com');
    const team = await group('Busy');
    const rounds = 8;
    for (let i = 0; i < rounds; i += 1) {
      const answers = await Promise.all([
        scim('PATCH', `/Users/${person.id}`, patchOf({ op: 'replace', path: 'title', value: `title ${i}` })),
        scim(
          'PATCH',
          `/Groups/${team.id}`,
          patchOf({ op: i % 2 ? 'remove' : 'add', path: 'members', value: [{ value: person.id }] }),
        ),
      ]);
      assert.deepEqual(
        answers.map((a) => a.status),
        [200, 200],
        answers.map((a) => a.text).join(),
      );
    }
    // Each of the 2 x rounds writes changed the user's answer (its title, or its groups).
    assert.equal((await scim('GET', `/Users/${person.id}`)).body.meta.version, `W/"${1 + 2 * rounds}"`);
    // A member added while that user is deleted: the add answers 200 or 400 (no such user), never 404.
    for (let i = 0; i < 6; i += 1) {
      const doomed = await user(`doomed${i}@example.com`);
      const [deleted, added] = await Promise.all([
        scim('DELETE', `/Users/${doomed.id}`),
        scim('PATCH', `/Groups/${team.id}`, patchOf({ op: 'add', path: 'members', value: [{ value: doomed.id }] })),
      ]);
      assert.equal(deleted.status, 204);
      assert.ok([200, 400].includes(added.status), added.text);
    }
    assert.deepEqual((await scim('GET', `/Groups/${team.id}`)).body.members, []);
  });

  test('hostile shapes are 400, not 500: deep or wide filters, deep bodies, lone surrogates; long ids are 404', async () => {
    const deep = `${'not ('.repeat(40)}userName pr${')'.repeat(40)}`;
    expectScimError(await find(deep), 400, 'invalidFilter');
    const wide = Array.from({ length: 300 }, () => 'id pr').join(' or ');
    expectScimError(await find(wide), 400, 'invalidFilter');
    assert.equal((await find(Array.from({ length: 100 }, () => 'id pr').join(' or '))).status, 200);
    const nested = `{"userName":"deep@example.com","title":${'['.repeat(20000)}${']'.repeat(20000)}}`;
    const deepBody = await server.api('POST', `${BASE}/Users`, {
      token,
      body: nested,
      headers: { accept: SCIM, 'content-type': SCIM },
    });
    expectScimError(deepBody, 400, 'invalidSyntax');
    expectScimError(await scim('POST', '/Users', { userName: 'x\ud800' }), 400, 'invalidValue');
    expectScimError(await scim('GET', `/Users/${'a'.repeat(65)}`), 404);
    // If-None-Match: * writes only what does not exist: a PUT of an existing user is 412, of a missing one 404.
    const existing = await user('exists@example.com');
    expectScimError(
      await scim('PUT', `/Users/${existing.id}`, { userName: 'exists@example.com', title: 'x' }, { 'if-none-match': '*' }),
      412,
    );
    expectScimError(
      await scim('PUT', `/Users/${randomUuid()}`, { userName: 'nobody@example.com' }, { 'if-none-match': '*' }),
      404,
    );
    assert.equal((await scim('GET', `/Users/${existing.id}`)).body.title, undefined);
    // Discovery documents take no filter (RFC 7644 4).
    for (const document of ['/ServiceProviderConfig', '/ResourceTypes', '/Schemas']) {
      expectScimError(await scim('GET', `${document}?filter=${encodeURIComponent('id eq "x"')}`), 403);
    }
  });

  test('removing a member by value after the user was deleted is 200 and changes nothing else (as Entra sends it)', async () => {
    const [gone, stays] = [await user('gone.member@example.com'), await user('stays.member@example.com')];
    const team = await group('Entra removals', { members: [{ value: gone.id }, { value: stays.id }] });
    assert.equal((await scim('DELETE', `/Users/${gone.id}`)).status, 204);
    const removed = await scim(
      'PATCH',
      `/Groups/${team.id}`,
      patchOf({ op: 'Remove', path: 'members', value: [{ $ref: null, value: gone.id }] }),
    );
    assert.equal(removed.status, 200, removed.text);
    assert.deepEqual(
      removed.body.members.map((m: { value: string }) => m.value),
      [stays.id],
    );
  });

  test('a busy directory holds up only its own account: another account reads and writes meanwhile', async () => {
    if (kind !== 'postgres') return; // SQLite has one writer for every account by design
    const busy = await server.newAccount('busy-directory');
    const busyToken = (await server.api('POST', '/directory-integration/tokens', { token: busy.token, body: { name: 'idp' } }))
      .body.token;
    const busyUsers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => scim('POST', '/Users', { userName: `busy${i}@example.com` }, {}, busyToken)),
    );
    const mine = await user('calm@example.com');
    // Hold the busy account's directory lock, as a long write would, and queue a dozen writes behind it.
    const held = server.db.transaction().execute(async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext(${`dpc-directory:${busy.accountId}`}))`.execute(trx);
      await new Promise((resolve) => setTimeout(resolve, 1500));
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const queued = busyUsers.map((answer) =>
      scim('PATCH', `/Users/${answer.body.id}`, patchOf({ op: 'replace', path: 'title', value: 't' }), {}, busyToken),
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    const started = Date.now();
    assert.equal((await scim('GET', `/Users/${mine.id}`)).status, 200);
    assert.equal((await scim('PATCH', `/Users/${mine.id}`, patchOf({ op: 'replace', path: 'title', value: 'x' }))).status, 200);
    assert.ok(Date.now() - started < 1000, `another account waited ${Date.now() - started} ms`);
    await held;
    assert.deepEqual(
      (await Promise.all(queued)).map((a) => a.status),
      busyUsers.map(() => 200),
    );
  });

  test('a group whose project was deleted stays writable; its members and name still change', async () => {
    const projectId = await server.newProject(caller, 'Short-lived');
    const member = await user('orphan.member@example.com');
    const made = await group('Orphaned', { projectId, role: 'viewer' });
    assert.equal((await server.api('DELETE', `/projects/${projectId}`, { token: caller.token })).status, 204);
    const path = `/Groups/${made.id}`;
    // Its answer lost the projectName: a new version.
    const after = await scim('GET', path, undefined, { 'if-none-match': made.meta.version });
    assert.equal(after.status, 200);
    assert.equal(after.body[GROUP_EXTENSION].projectName, undefined);
    assert.notEqual(after.body.meta.version, made.meta.version);
    const added = await scim('PATCH', path, patchOf({ op: 'add', path: 'members', value: [{ value: member.id }] }));
    assert.equal(added.status, 200, added.text);
    const renamed = await scim('PATCH', path, patchOf({ op: 'replace', path: 'displayName', value: 'Still here' }));
    assert.equal(renamed.status, 200, renamed.text);
    const replaced = await scim('PUT', path, { displayName: 'Still here', projectId, role: 'viewer', members: [] });
    assert.equal(replaced.status, 200, replaced.text);
    // Naming the deleted project anew (another group) is still refused.
    expectScimError(await scim('POST', '/Groups', { displayName: 'New', projectId }), 400, 'invalidValue');
    const grants = await server.api('GET', `/directory-integration/users/${member.id}/project-grants`, { token: caller.token });
    assert.deepEqual(grants.body, []);
  });

  test('odd requests: a huge startIndex, malformed JSON, misspelt SearchRequest members; a search is not audited', async () => {
    for (const startIndex of ['100000000000000000000', '9223372036854775807', '9007199254740993']) {
      const page = await scim('GET', `/Users?startIndex=${startIndex}`);
      assert.equal(page.status, 200, page.text);
      assert.deepEqual(page.body.Resources, []);
    }
    const SEARCH = 'urn:ietf:params:scim:api:messages:2.0:SearchRequest';
    const searched = await scim('POST', '/Users/.search', { schemas: [SEARCH], startIndex: 1e20 });
    assert.equal(searched.status, 200, searched.text);
    const misspelt = expectScimError(
      await scim('POST', '/Users/.search', { schemas: [SEARCH], filtr: 'userName eq "nobody"' }),
      400,
      'invalidSyntax',
    );
    assert.match(misspelt.detail, /filtr/);
    for (const [body, type] of [
      ['{bad', SCIM],
      ['', SCIM],
      ['{bad', 'application/json'],
    ]) {
      const answer = await server.api('POST', `${BASE}/Users`, {
        token,
        body,
        headers: { accept: SCIM, 'content-type': type },
      });
      const error = expectScimError(answer, 400, 'invalidSyntax');
      assert.doesNotMatch(error.detail, /application\/json/);
    }
    // A write asking to see an attribute that does not exist is refused before it writes.
    const untouched = await user('projection.first@example.com', { title: 'Before' });
    const refused = await scim(
      'PATCH',
      `/Users/${untouched.id}?attributes=emails.nope`,
      patchOf({ op: 'replace', path: 'title', value: 'After' }),
    );
    expectScimError(refused, 400, 'invalidPath');
    expectScimError(await scim('POST', '/Users?excludedAttributes=nope', { userName: 'projection.second@example.com' }), 400);
    assert.equal((await scim('GET', `/Users/${untouched.id}`)).body.title, 'Before');
    assert.equal((await find('userName eq "projection.second@example.com"')).body.totalResults, 0);
    const before = await server.api('GET', '/events', { token: caller.token });
    await scim('POST', '/Groups/.search', { schemas: [SEARCH] });
    const after = await server.api('GET', '/events', { token: caller.token });
    assert.equal(after.body.total, before.body.total, 'a search is a read');
  });

  test("groups: extension fields, members in their own table, the users' groups, and the project grant", async () => {
    const projectId = await server.newProject(caller, 'Warehouse');
    const [ann, ben] = [await user('ann@example.com', { displayName: 'Ann' }), await user('ben@example.com')];
    const created = await group('Engineers', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group', GROUP_EXTENSION],
      [GROUP_EXTENSION]: { projectId, role: 'developer', environment: 'production' },
      members: [{ value: ann.id }],
    });
    assert.deepEqual(created.schemas, ['urn:ietf:params:scim:schemas:core:2.0:Group', GROUP_EXTENSION]);
    const fields = {
      accountId: caller.accountId,
      accountName: 'test account',
      projectId,
      projectName: 'Warehouse',
      environment: 'production',
      role: 'developer',
    };
    assert.deepEqual(created[GROUP_EXTENSION], fields);
    // Strict SCIM clients (RFC 7643 3.3): extension attributes only inside their extension object.
    for (const name of Object.keys(fields)) assert.equal(created[name], undefined, name);
    assert.deepEqual(created.members, [
      { value: ann.id, $ref: `${created.meta.location.split('/Groups/')[0]}/Users/${ann.id}`, display: 'Ann', type: 'USER' },
    ]);
    const rows = await server.db.selectFrom('scimGroupMembers').selectAll().where('groupId', '=', created.id).execute();
    assert.deepEqual(rows, [{ groupId: created.id, userId: ann.id }]);

    const annRead = await scim('GET', `/Users/${ann.id}`);
    assert.deepEqual(annRead.body.groups, [
      { value: created.id, $ref: created.meta.location, display: 'Engineers', type: 'DIRECT' },
    ]);
    assert.equal((await scim('GET', `/Users/${ben.id}`)).body.groups, undefined);
    const grants = await server.api('GET', `/directory-integration/users/${ann.id}/project-grants`, { token: caller.token });
    assert.deepEqual(grants.body, [{ projectId, projectName: 'Warehouse', role: 'developer', groupId: created.id }]);
    assert.deepEqual(
      (await server.api('GET', `/directory-integration/users/${ben.id}/project-grants`, { token: caller.token })).body,
      [],
    );

    // Filters over members and groups, and a group without its members.
    assert.deepEqual(ids(await find(`members[value eq "${ann.id}"]`, 'Groups')), ['Engineers']);
    assert.deepEqual(ids(await find(`members.value eq "${ben.id}"`, 'Groups')), []);
    assert.deepEqual(ids(await find(`groups.value eq "${created.id}"`)), ['ann@example.com']);
    assert.deepEqual(ids(await find('displayName eq "engineers"', 'Groups')), ['Engineers']);
    assert.deepEqual(ids(await find(`projectId eq "${projectId}" and role eq "developer"`, 'Groups')), ['Engineers']);
    const lean = await scim('GET', `/Groups/${created.id}?excludedAttributes=members`);
    assert.equal(lean.body.members, undefined);
    assert.equal(lean.body.displayName, 'Engineers');

    expectScimError(await scim('POST', '/Groups', { displayName: 'x', projectId: crypto.randomUUID() }), 400, 'invalidValue');
    expectScimError(await scim('POST', '/Groups', { displayName: 'x', role: 'owner' }), 400, 'invalidValue');
    expectScimError(
      await scim('POST', '/Groups', { displayName: 'x', members: [{ value: crypto.randomUUID() }] }),
      400,
      'invalidValue',
    );

    // Deleting a user removes its memberships; deleting the group removes the grant.
    assert.equal((await scim('DELETE', `/Users/${ann.id}`)).status, 204);
    assert.deepEqual((await scim('GET', `/Groups/${created.id}`)).body.members, []);
    assert.equal((await scim('DELETE', `/Groups/${created.id}`)).status, 204);
    expectScimError(await scim('GET', `/Groups/${created.id}`), 404);
  });

  test('E25 patches group members: add (duplicates ignored), remove by filter or by value, remove all, replace, atomically', async () => {
    const users = [];
    for (const name of ['m1', 'm2', 'm3', 'm4']) users.push((await user(`${name}@members.example`)).id);
    const [u1, u2, u3, u4] = users;
    const created = await group('Patched');
    const path = `/Groups/${created.id}`;
    const members = async () => ((await scim('GET', path)).body.members as { value: string }[]).map((m) => m.value).sort();
    const patch = async (...operations: unknown[]) => {
      const answer = await scim('PATCH', path, patchOf(...operations));
      assert.equal(answer.status, 200, answer.text);
      return answer;
    };
    await patch({ op: 'add', path: 'members', value: [{ value: u1 }, { value: u2 }] });
    assert.deepEqual(await members(), [u1, u2].sort());
    await patch(
      { op: 'Add', path: 'members', value: [{ value: u2 }, { value: u3, display: 'ignored' }] },
      { op: 'add', path: 'members', value: [{ value: u3 }] },
    );
    assert.deepEqual(await members(), [u1, u2, u3].sort());
    await patch({ op: 'remove', path: `members[value eq "${u1}"]` });
    assert.deepEqual(await members(), [u2, u3].sort());
    await patch({ op: 'Remove', path: 'members', value: [{ value: u2 }] });
    assert.deepEqual(await members(), [u3]);
    await patch({ op: 'add', value: { members: [{ value: u4 }], displayName: 'Renamed' } });
    assert.deepEqual(await members(), [u3, u4].sort());
    await patch({ op: 'remove', path: 'members' });
    assert.deepEqual(await members(), []);
    await patch({ op: 'replace', path: 'members', value: [{ value: u1 }, { value: u4 }] });
    assert.deepEqual(await members(), [u1, u4].sort());
    await patch({ op: 'remove', path: `members[value eq "${u1}" or value eq "${u4}"]` });
    assert.deepEqual(await members(), []);
    const renamed = await patch(
      { op: 'replace', path: 'displayName', value: 'Final' },
      { op: 'replace', path: `${GROUP_EXTENSION}:environment`, value: 'test' },
    );
    assert.equal(renamed.body.displayName, 'Final');
    assert.equal(renamed.body[GROUP_EXTENSION].environment, 'test');
    assert.deepEqual(ids(await find('displayName eq "final"', 'Groups')), ['Final']);

    // Atomic: a valid add, then a member of another account, a bad path, a bad filter: nothing changes.
    await patch({ op: 'add', path: 'members', value: [{ value: u1 }] });
    const version = (await scim('GET', path)).body.meta.version;
    const stranger = (await user('stranger@example.com', {}, (await server.newAccount('stranger')).token)).id;
    const failures: [unknown[], string][] = [
      [
        [
          { op: 'add', path: 'members', value: [{ value: u2 }] },
          { op: 'add', path: 'members', value: [{ value: stranger }] },
        ],
        'invalidValue',
      ],
      [
        [
          { op: 'remove', path: 'members' },
          { op: 'add', path: 'members', value: [{ value: 'not-a-user' }] },
        ],
        'invalidValue',
      ],
      [
        [
          { op: 'remove', path: 'members' },
          { op: 'replace', path: 'members[value eq "x"].display', value: 'y' },
        ],
        'invalidPath',
      ],
      [
        [
          { op: 'remove', path: 'members' },
          { op: 'remove', path: 'members[display eq "x"]' },
        ],
        'invalidFilter',
      ],
      [
        [
          { op: 'remove', path: 'members' },
          { op: 'remove', path: 'members[value eq ]' },
        ],
        'invalidFilter',
      ],
      [
        [
          { op: 'remove', path: 'members' },
          { op: 'replace', path: 'nothing', value: 'x' },
        ],
        'invalidPath',
      ],
      [[{ op: 'remove', path: 'members' }, { op: 'remove' }], 'noTarget'],
      [
        [
          { op: 'remove', path: 'members' },
          { op: 'replace', path: 'displayName', value: 7 },
        ],
        'invalidValue',
      ],
      [
        [
          { op: 'remove', path: 'members' },
          { op: 'add', path: 'members', value: [{ value: u2, type: 'Group' }] },
        ],
        'invalidValue',
      ],
    ];
    for (const [operations, scimType] of failures) {
      const answer = await scim('PATCH', path, patchOf(...operations));
      assert.equal(expectScimError(answer, 400).scimType, scimType, JSON.stringify(operations));
    }
    expectScimError(await scim('PATCH', path, { Operations: [{ op: 'remove', path: 'members' }] }), 400, 'invalidSyntax');
    const after = await scim('GET', path);
    assert.deepEqual(
      after.body.members.map((m: { value: string }) => m.value),
      [u1],
    );
    assert.equal(after.body.meta.version, version);
    expectScimError(await scim('PATCH', path, patchOf({ op: 'remove', path: 'members' }), { 'if-match': 'W/"1"' }), 412);
    expectScimError(
      await scim('PATCH', '/Groups/00000000-0000-0000-0000-000000000000', patchOf({ op: 'remove', path: 'members' })),
      404,
    );
    // PUT replaces the members too.
    const replaced = await scim('PUT', path, { displayName: 'Final', members: [{ value: u2 }, { value: u3 }] });
    assert.equal(replaced.status, 200, replaced.text);
    assert.deepEqual(await members(), [u2, u3].sort());
  });

  test("accounts never see each other's users or groups", async () => {
    const mine = await user('isolated@example.com');
    const myGroup = await group('Isolated');
    const other = await server.newAccount('other');
    const otherToken = (await server.api('POST', '/directory-integration/tokens', { token: other.token, body: { name: 'idp' } }))
      .body.token;
    const as = (method: string, path: string, body?: unknown) => scim(method, path, body, {}, otherToken);
    expectScimError(await as('GET', `/Users/${mine.id}`), 404);
    expectScimError(await as('GET', `/Groups/${myGroup.id}`), 404);
    expectScimError(await as('PATCH', `/Users/${mine.id}`, patchOf({ op: 'replace', path: 'active', value: false })), 404);
    expectScimError(await as('PUT', `/Groups/${myGroup.id}`, { displayName: 'taken' }), 404);
    expectScimError(await as('DELETE', `/Users/${mine.id}`), 404);
    const listed = await as('GET', `/Users?filter=${encodeURIComponent('userName eq "isolated@example.com"')}`);
    assert.equal(listed.body.totalResults, 0);
    assert.equal((await as('GET', '/Groups')).body.totalResults, 0);
    // The same userName may exist in another account.
    const theirs = await user('isolated@example.com', {}, otherToken);
    const theirGroup = (await as('POST', '/Groups', { displayName: 'Theirs' })).body;
    // Every kind of filter stays in the account: equality, negation, presence, memberships, dates.
    const cases: [string, string, string[]][] = [
      ['Users', 'userName eq "isolated@example.com"', [theirs.id]],
      ['Users', 'not (userName eq "nobody")', [theirs.id]],
      ['Users', 'userName pr or title pr', [theirs.id]],
      ['Users', 'meta.created gt "2000-01-01T00:00:00Z"', [theirs.id]],
      ['Users', `groups.value pr or id eq "${mine.id}"`, []],
      ['Groups', 'members pr or displayName pr', [theirGroup.id]],
      ['Groups', `members[value eq "${mine.id}"] or displayName eq "isolated"`, []],
      ['Groups', 'not (displayName eq "x")', [theirGroup.id]],
    ];
    for (const [resource, filter, expected] of cases) {
      const answer = await as('GET', `/${resource}?filter=${encodeURIComponent(filter)}`);
      assert.deepEqual(
        answer.body.Resources.map((r: { id: string }) => r.id),
        expected,
        filter,
      );
    }
    expectScimError(
      await as('PATCH', `/Groups/${theirGroup.id}`, patchOf({ op: 'add', path: 'members', value: [{ value: mine.id }] })),
      400,
      'invalidValue',
    );
    expectScimError(
      await scim('PATCH', `/Groups/${myGroup.id}`, patchOf({ op: 'add', path: 'members', value: [{ value: theirs.id }] })),
      400,
      'invalidValue',
    );
  });

  test("Okta's provisioning sequence: find by userName, create, read, update, deactivate, push a group and its members", async () => {
    const okta = (method: string, path: string, body?: unknown) =>
      scim(method, path, body, body === undefined ? {} : { 'content-type': 'application/scim+json; charset=utf-8' });
    const lookup = await okta(
      'GET',
      `/Users?filter=${encodeURIComponent('userName eq "isabella.okta@example.com"')}&startIndex=1&count=100`,
    );
    assert.deepEqual(lookup.body, {
      schemas: ['urn:ietf:params:scim:api:messages:2.0:ListResponse'],
      totalResults: 0,
      startIndex: 1,
      itemsPerPage: 0,
      Resources: [],
    });
    const created = await okta('POST', '/Users', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      userName: 'isabella.okta@example.com',
      name: { givenName: 'Isabella', familyName: 'Okta' },
      emails: [{ primary: true, value: 'isabella.okta@example.com', type: 'work' }],
      displayName: 'Isabella Okta',
      locale: 'en-US',
      externalId: '00ujl29u0le5T6Aj10h7',
      groups: [],
      password: '1mz050nq',
      active: true,
    });
    assert.equal(created.status, 201, created.text);
    const id = created.body.id;
    const found = await okta(
      'GET',
      `/Users?filter=${encodeURIComponent('userName eq "Isabella.Okta@example.com"')}&startIndex=1&count=100`,
    );
    assert.equal(found.body.totalResults, 1);
    assert.equal(found.body.Resources[0].id, id);
    assert.equal((await okta('GET', `/Users/${id}`)).body.active, true);
    const updated = await okta('PUT', `/Users/${id}`, { ...created.body, name: { givenName: 'Bella', familyName: 'Okta' } });
    assert.equal(updated.status, 200, updated.text);
    assert.equal(updated.body.name.givenName, 'Bella');
    const deactivated = await okta('PATCH', `/Users/${id}`, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'replace', value: { active: false } }],
    });
    assert.equal(deactivated.status, 200, deactivated.text);
    assert.equal(deactivated.body.active, false);
    assert.deepEqual(ids(await find('active eq false and userName eq "isabella.okta@example.com"')), [
      'isabella.okta@example.com',
    ]);

    const pushed = await okta('POST', '/Groups', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:Group'],
      displayName: 'Okta Test Group',
      members: [],
    });
    assert.equal(pushed.status, 201, pushed.text);
    const groupPath = `/Groups/${pushed.body.id}`;
    assert.equal(
      (await okta('GET', `/Groups?filter=${encodeURIComponent('displayName eq "Okta Test Group"')}&startIndex=1&count=100`)).body
        .totalResults,
      1,
    );
    const renamed = await okta('PATCH', groupPath, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'replace', value: { id: pushed.body.id, displayName: 'Okta Group' } }],
    });
    assert.equal(renamed.body.displayName, 'Okta Group');
    const added = await okta('PATCH', groupPath, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'add', path: 'members', value: [{ value: id, display: 'isabella.okta@example.com' }] }],
    });
    assert.deepEqual(
      added.body.members.map((m: { value: string }) => m.value),
      [id],
    );
    const removed = await okta('PATCH', groupPath, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'remove', path: `members[value eq "${id}"]` }],
    });
    assert.deepEqual(removed.body.members, []);
    assert.equal((await okta('GET', '/Groups?startIndex=1&count=100')).status, 200);
    assert.equal((await okta('DELETE', groupPath)).status, 204);
  });

  test("Microsoft Entra's provisioning sequence: filter, create with the enterprise extension, PATCH with its quirks, group members", async () => {
    const entra = (method: string, path: string, body?: unknown) => scim(method, path, body);
    const userName = 'Test_User_dfeef4c5-5681-4387-b016-bdf221e82081';
    assert.equal((await entra('GET', `/Users?filter=${encodeURIComponent(`userName eq "${userName}"`)}`)).body.totalResults, 0);
    const created = await entra('POST', '/Users', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User', 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User'],
      externalId: '0a21f0f2-8d2a-4f8e-bf98-7363c4aed4ef',
      userName,
      active: true,
      emails: [{ primary: true, type: 'work', value: 'Test_User_fd0ea19b-0777-472c-9f96-4f70d2226f2e@testuser.com' }],
      meta: { resourceType: 'User' },
      name: { formatted: 'givenName familyName', familyName: 'familyName', givenName: 'givenName' },
      roles: [],
      'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User': { department: 'R&D' },
    });
    assert.equal(created.status, 201, created.text);
    const id = created.body.id;
    assert.equal(
      (await entra('GET', `/Users?filter=${encodeURIComponent(`userName eq "${userName.toLowerCase()}"`)}`)).body.Resources[0].id,
      id,
    );
    const patched = await entra('PATCH', `/Users/${id}`, {
      schemas: [PATCH_OP],
      Operations: [
        { op: 'Replace', path: 'emails[type eq "work"].value', value: 'updatedEmail@microsoft.com' },
        { op: 'Replace', path: 'name.familyName', value: 'updatedFamilyName' },
        { op: 'Add', path: 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber', value: '42' },
      ],
    });
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.body.emails[0].value, 'updatedEmail@microsoft.com');
    assert.equal(patched.body.name.familyName, 'updatedFamilyName');
    const disabled = await entra('PATCH', `/Users/${id}`, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'Replace', path: 'active', value: 'False' }],
    });
    assert.equal(disabled.body.active, false);

    const group = await entra('POST', '/Groups', {
      schemas: [
        'urn:ietf:params:scim:schemas:core:2.0:Group',
        'http://schemas.microsoft.com/2006/11/ResourceManagement/ADSCIM/2.0/Group',
      ],
      externalId: '8aa1a0c0-c4c3-4bc0-b4a5-2ef676900159',
      displayName: 'displayName',
      meta: { resourceType: 'Group' },
    });
    assert.equal(group.status, 201, group.text);
    const gid = group.body.id;
    const byName = await entra(
      'GET',
      `/Groups?excludedAttributes=members&filter=${encodeURIComponent('displayName eq "displayName"')}`,
    );
    assert.equal(byName.body.Resources[0].id, gid);
    assert.equal(byName.body.Resources[0].members, undefined);
    const add = await entra('PATCH', `/Groups/${gid}`, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'Add', path: 'members', value: [{ $ref: null, value: id }] }],
    });
    assert.equal(add.status, 200, add.text);
    const member = await entra(
      'GET',
      `/Groups?excludedAttributes=members&filter=${encodeURIComponent(`id eq "${gid}" and members[value eq "${id}"]`)}`,
    );
    assert.equal(member.body.totalResults, 1);
    const remove = await entra('PATCH', `/Groups/${gid}`, {
      schemas: [PATCH_OP],
      Operations: [{ op: 'Remove', path: 'members', value: [{ $ref: null, value: id }] }],
    });
    assert.equal(remove.status, 200, remove.text);
    assert.equal(
      (
        await entra(
          'GET',
          `/Groups?excludedAttributes=members&filter=${encodeURIComponent(`id eq "${gid}" and members[value eq "${id}"]`)}`,
        )
      ).body.totalResults,
      0,
    );
    assert.equal((await entra('GET', `/Groups/${gid}?excludedAttributes=members`)).body.displayName, 'displayName');
    assert.equal((await entra('DELETE', `/Users/${id}`)).status, 204);
    assert.equal((await entra('DELETE', `/Groups/${gid}`)).status, 204);
  });

  test('discovery: /ServiceProviderConfig, /ResourceTypes and /Schemas describe what is served', async () => {
    const config = await scim('GET', '/ServiceProviderConfig');
    assert.equal(config.status, 200, config.text);
    assert.ok(config.headers.get('content-type')?.startsWith(SCIM));
    assert.deepEqual(
      {
        patch: config.body.patch,
        bulk: config.body.bulk,
        filter: config.body.filter,
        sort: config.body.sort,
        etag: config.body.etag,
        changePassword: config.body.changePassword,
      },
      {
        patch: { supported: true },
        bulk: { supported: false, maxOperations: 0, maxPayloadSize: 0 },
        filter: { supported: true, maxResults: 1000 },
        sort: { supported: true },
        etag: { supported: true },
        changePassword: { supported: true },
      },
    );
    assert.equal(config.body.authenticationSchemes[0].type, 'oauthbearertoken');
    const types = await scim('GET', '/ResourceTypes');
    assert.deepEqual(
      types.body.Resources.map((t: { id: string; endpoint: string }) => [t.id, t.endpoint]),
      [
        ['User', '/Users'],
        ['Group', '/Groups'],
      ],
    );
    assert.deepEqual(types.body.Resources[1].schemaExtensions, [{ schema: GROUP_EXTENSION, required: false }]);
    assert.equal((await scim('GET', '/ResourceTypes/Group')).body.endpoint, '/Groups');
    expectScimError(await scim('GET', '/ResourceTypes/Device'), 404);
    const schemas = await scim('GET', '/Schemas');
    assert.deepEqual(
      schemas.body.Resources.map((s: { id: string }) => s.id),
      ['urn:ietf:params:scim:schemas:core:2.0:User', 'urn:ietf:params:scim:schemas:core:2.0:Group', GROUP_EXTENSION],
    );
    const userSchema = (await scim('GET', '/Schemas/urn:ietf:params:scim:schemas:core:2.0:User')).body;
    const names = userSchema.attributes.map((a: { name: string }) => a.name);
    for (const name of [
      'userName',
      'name',
      'displayName',
      'nickName',
      'profileUrl',
      'title',
      'userType',
      'preferredLanguage',
      'locale',
      'timezone',
      'active',
      'password',
      'emails',
      'phoneNumbers',
      'ims',
      'photos',
      'addresses',
      'groups',
      'entitlements',
      'roles',
      'x509Certificates',
    ]) {
      assert.ok(names.includes(name), name);
    }
    const password = userSchema.attributes.find((a: { name: string }) => a.name === 'password');
    assert.deepEqual([password.mutability, password.returned], ['writeOnly', 'never']);
    const extension = (await scim('GET', `/Schemas/${GROUP_EXTENSION}`)).body;
    assert.deepEqual(
      extension.attributes.map((a: { name: string }) => a.name),
      ['accountId', 'accountName', 'projectId', 'projectName', 'environment', 'role'],
    );
  });

  test("checked against libraries: SCIMMY reads our resources and lists; the SQL filters agree with scim2-parse-filter's evaluator", async () => {
    const other = await server.newAccount('libraries');
    const people = [
      {
        userName: 'ada@lovelace.example',
        title: 'countess',
        active: true,
        name: { givenName: 'ada', familyName: 'lovelace' },
        emails: [
          { value: 'ada@work.example', type: 'work' },
          { value: 'ada@home.example', type: 'home' },
        ],
      },
      {
        userName: 'alan@turing.example',
        title: 'mathematician',
        active: false,
        name: { givenName: 'alan', familyName: 'turing' },
        emails: [{ value: 'alan@home.example', type: 'work' }],
      },
      {
        userName: 'grace@hopper.example',
        active: true,
        name: { givenName: 'grace', familyName: 'hopper' },
        emails: [{ value: 'grace@work.example', type: 'home' }],
      },
      { userName: 'edsger@dijkstra.example', name: { familyName: 'dijkstra' } },
    ];
    for (const person of people) await user(person.userName, person, other.token);
    const group = (await scim('POST', '/Groups', { displayName: 'pioneers' }, {}, other.token)).body;
    const everyone = await scim('GET', '/Users?sortBy=userName', undefined, {}, other.token);
    await scim(
      'PATCH',
      `/Groups/${group.id}`,
      patchOf({ op: 'add', path: 'members', value: everyone.body.Resources.map((r: { id: string }) => ({ value: r.id })) }),
      {},
      other.token,
    );

    // SCIMMY holds groups' and members' type to RFC 7643's canonical "direct"/"User"; this server answers the
    // specification's "DIRECT"/"USER", so those two values are set aside before the check.
    const withoutTypes = (resource: Record<string, any>) => {
      for (const key of ['groups', 'members']) resource[key]?.forEach((item: Record<string, unknown>) => delete item.type);
      return resource;
    };
    const list = new SCIMMY.Messages.ListResponse((await scim('GET', '/Users?sortBy=userName', undefined, {}, other.token)).body);
    assert.equal(list.totalResults, 4);
    for (const resource of list.Resources) SCIMMY.Schemas.User.definition.coerce(withoutTypes(resource), 'out');
    SCIMMY.Schemas.Group.definition.coerce(
      withoutTypes((await scim('GET', `/Groups/${group.id}`, undefined, {}, other.token)).body),
      'out',
    );

    const resources = (await scim('GET', '/Users', undefined, {}, other.token)).body.Resources;
    const filters = [
      'userName eq "ada@lovelace.example"',
      'userName co "ur"',
      'userName sw "a"',
      'userName ew ".example"',
      'title pr',
      'userName gt "b" and userName lt "g"',
      'name.familyName ge "hopper"',
      'name.givenName le "alan"',
      'active eq true or title eq "mathematician"',
      'not (title pr) and name.familyName pr',
      'emails[type eq "work" and value co "work"]',
      'emails[type eq "home"]',
      'emails.value sw "a"',
      '(emails[value ew "home.example"] or userName sw "e") and not (active eq false)',
    ];
    for (const text of filters) {
      const expected = resources
        .filter(referenceFilter(parseFilter(text)))
        .map((r: { userName: string }) => r.userName)
        .sort();
      const answer = await scim('GET', `/Users?filter=${encodeURIComponent(text)}`, undefined, {}, other.token);
      assert.deepEqual(ids(answer), expected, text);
    }
  });

  test('concurrent PATCHes to one resource all land: none is lost, none is refused', async () => {
    const target = await group('Concurrent');
    const people: string[] = [];
    for (let i = 0; i < 12; i += 1) people.push((await user(`concurrent${i}@example.com`)).id);
    const answers = await Promise.all(
      people.map((id) => scim('PATCH', `/Groups/${target.id}`, patchOf({ op: 'add', path: 'members', value: [{ value: id }] }))),
    );
    assert.deepEqual(
      answers.map((a) => a.status),
      people.map(() => 200),
    );
    const read = await scim('GET', `/Groups/${target.id}`);
    assert.deepEqual(read.body.members.map((m: { value: string }) => m.value).sort(), [...people].sort());
    assert.equal(read.body.meta.version, `W/"${people.length + 1}"`);
    const one = people[0];
    const emails = await Promise.all(
      ['a', 'b', 'c', 'd', 'e', 'f'].map((local) =>
        scim('PATCH', `/Users/${one}`, patchOf({ op: 'add', path: 'emails', value: [{ value: `${local}@example.com` }] })),
      ),
    );
    assert.deepEqual(
      emails.map((a) => a.status),
      [200, 200, 200, 200, 200, 200],
    );
    assert.equal((await scim('GET', `/Users/${one}`)).body.emails.length, 6);
    // A user renamed while it joins and leaves a group: each write locks the other's row too (its
    // version moves), in the opposite order; none may fail.
    const renamed = people[1];
    const changes = await Promise.all(
      Array.from({ length: 15 }, (_, i) => [
        scim('PATCH', `/Users/${renamed}`, patchOf({ op: 'replace', path: 'displayName', value: `Name ${i}` })),
        scim(
          'PATCH',
          `/Groups/${target.id}`,
          patchOf({ op: i % 2 ? 'add' : 'remove', path: 'members', value: [{ value: renamed }] }),
        ),
      ]).flat(),
    );
    assert.deepEqual(
      changes.filter((a) => a.status !== 200).map((a) => a.text),
      [],
    );
  });

  test('PATCH add or replace of a complex value sets the sub-attributes sent and leaves the others (RFC 7644 3.5.2.3)', async () => {
    const created = await user('sem.antic@example.com', {
      name: { givenName: 'Sem', familyName: 'Antic' },
      emails: [
        { value: 'sem@work.example', type: 'work', primary: true, display: 'Work' },
        { value: 'sem@home.example', type: 'home' },
      ],
    });
    const path = `/Users/${created.id}`;
    const patch = async (...operations: unknown[]) => {
      const answer = await scim('PATCH', path, patchOf(...operations));
      assert.equal(answer.status, 200, answer.text);
      return answer.body;
    };
    let body = await patch({ op: 'replace', path: 'name', value: { givenName: 'Semi' } });
    assert.deepEqual(body.name, { givenName: 'Semi', familyName: 'Antic' });
    body = await patch({ op: 'replace', value: { name: { familyName: 'Other' } } });
    assert.deepEqual(body.name, { givenName: 'Semi', familyName: 'Other' }, 'the path-less form too');
    body = await patch({ op: 'Replace', value: { NAME: { FamilyName: 'Antic', formatted: 'Semi Antic' } } });
    assert.deepEqual(body.name, { givenName: 'Semi', familyName: 'Antic', formatted: 'Semi Antic' }, 'names in any case');
    body = await patch({ op: 'replace', path: 'name', value: { formatted: null, middleName: 'Q' } });
    assert.deepEqual(
      body.name,
      { givenName: 'Semi', familyName: 'Antic', middleName: 'Q' },
      'a sub-attribute sent null is removed',
    );
    body = await patch({ op: 'replace', path: 'name.middleName', value: null });
    assert.deepEqual(body.name, { givenName: 'Semi', familyName: 'Antic' });
    // A value filter: the matching values' sub-attributes sent are replaced, their others and the other values kept.
    body = await patch({ op: 'replace', path: 'emails[type eq "work"]', value: { value: 'semi@work.example' } });
    assert.deepEqual(body.emails, [
      { value: 'semi@work.example', type: 'work', primary: true, display: 'Work' },
      { value: 'sem@home.example', type: 'home' },
    ]);
    body = await patch({ op: 'replace', path: 'emails[type eq "home"]', value: { Display: 'Home', primary: 'False' } });
    assert.deepEqual(body.emails[1], { value: 'sem@home.example', type: 'home', display: 'Home', primary: false });
    expectScimError(
      await scim('PATCH', path, patchOf({ op: 'replace', path: 'emails[type eq "work"]', value: 'x' })),
      400,
      'invalidValue',
    );
    // Without a filter, replace of a multi-valued attribute replaces the whole list.
    body = await patch({ op: 'replace', path: 'emails', value: [{ value: 'only@example.com' }] });
    assert.deepEqual(body.emails, [{ value: 'only@example.com' }]);
    const read = await scim('GET', path);
    assert.deepEqual(read.body.name, { givenName: 'Semi', familyName: 'Antic' });
    assert.deepEqual(read.body.emails, [{ value: 'only@example.com' }]);
  });

  test('PATCH add and remove recognise a value already there whatever its key order, case and boolean form', async () => {
    const created = await user('dup.values@example.com', {
      emails: [{ value: 'pat@work.com', type: 'work', primary: true }],
      photos: [{ value: 'https://photos.example.com/A.png' }],
    });
    const path = `/Users/${created.id}`;
    const patch = async (...operations: unknown[]) => {
      const answer = await scim('PATCH', path, patchOf(...operations));
      assert.equal(answer.status, 200, answer.text);
      return answer.body;
    };
    const only = [{ value: 'pat@work.com', type: 'work', primary: true }];
    let body = await patch({ op: 'add', path: 'emails', value: [{ type: 'work', value: 'pat@work.com', primary: true }] });
    assert.deepEqual(body.emails, only, 'keys in another order');
    body = await patch({ op: 'add', path: 'emails', value: [{ value: 'pat@work.com', type: 'work', primary: 'True' }] });
    assert.deepEqual(body.emails, only, "Entra's string boolean");
    body = await patch({ op: 'add', value: { emails: [{ Primary: true, TYPE: 'Work', Value: 'PAT@work.com' }] } });
    assert.deepEqual(body.emails, only, 'names in any case; values as their caseExact says (emails are not case-exact)');
    body = await patch({ op: 'add', path: 'photos', value: [{ value: 'https://photos.example.com/a.png' }] });
    assert.equal(body.photos.length, 2, 'a photo URL is case-exact: another value');
    body = await patch({ op: 'add', path: 'emails', value: [{ value: 'pat@home.com', type: 'home', primary: false }] });
    body = await patch({ op: 'add', path: 'emails', value: [{ type: 'home', value: 'pat@home.com' }] });
    assert.equal(body.emails.length, 2, 'an unassigned primary is false');
    body = await patch({ op: 'remove', path: 'emails', value: [{ primary: false, type: 'home', value: 'pat@home.com' }] });
    assert.deepEqual(body.emails, only, 'remove with a value list in another key order');
    body = await patch({ op: 'remove', path: 'emails', value: [{ primary: 'true', TYPE: 'work', Value: 'Pat@Work.com' }] });
    assert.equal(body.emails, undefined);
    assert.equal((await scim('GET', path)).body.emails, undefined);
  });

  test('primary is true on one value at most: 400 on POST and PUT; a PATCH that makes a value primary demotes the others', async () => {
    const twice = [
      { value: 'a@primary.example', primary: true },
      { value: 'b@primary.example', primary: 'True' },
    ];
    const refused = expectScimError(
      await scim('POST', '/Users', { userName: 'two.primaries@example.com', emails: twice }),
      400,
      'invalidValue',
    );
    assert.match(refused.detail, /emails/);
    assert.equal((await find('userName eq "two.primaries@example.com"')).body.totalResults, 0);
    const created = await user('one.primary@example.com', {
      emails: [{ value: 'a@primary.example', primary: true }, { value: 'b@primary.example' }],
    });
    const path = `/Users/${created.id}`;
    expectScimError(await scim('PUT', path, { userName: 'one.primary@example.com', emails: twice }), 400, 'invalidValue');
    const primaries = (body: { emails: { value: string; primary?: boolean }[] }) =>
      body.emails.filter((e) => e.primary === true).map((e) => e.value);
    const patch = async (...operations: unknown[]) => {
      const answer = await scim('PATCH', path, patchOf(...operations));
      assert.equal(answer.status, 200, answer.text);
      return answer.body;
    };
    let body = await patch({ op: 'add', path: 'emails', value: [{ value: 'c@primary.example', primary: true }] });
    assert.deepEqual(primaries(body), ['c@primary.example']);
    assert.equal(body.emails[0].primary, false, 'the former primary is set false');
    body = await patch({ op: 'replace', path: 'emails[value eq "b@primary.example"].primary', value: true });
    assert.deepEqual(primaries(body), ['b@primary.example']);
    body = await patch({ op: 'replace', path: 'emails[value eq "a@primary.example"]', value: { primary: 'True' } });
    assert.deepEqual(primaries(body), ['a@primary.example']);
    body = await patch({ op: 'replace', path: 'phoneNumbers[type eq "work"].value', value: '+1 555 0100' });
    body = await patch({ op: 'add', path: 'emails', value: [{ value: 'a@primary.example', primary: true }] });
    assert.deepEqual(primaries(body), ['a@primary.example'], 'adding the primary value again changes nothing');
    const version = body.meta.version;
    // Two values made primary at once: refused, nothing changed.
    for (const operation of [
      {
        op: 'add',
        path: 'emails',
        value: [
          { value: 'd@primary.example', primary: true },
          { value: 'e@primary.example', primary: true },
        ],
      },
      { op: 'replace', path: 'emails', value: twice },
      { op: 'replace', path: 'emails[value ew "primary.example"].primary', value: true },
      { op: 'replace', path: 'emails.primary', value: true },
    ]) {
      const answer = await scim('PATCH', path, patchOf({ op: 'replace', path: 'title', value: 'changed' }, operation));
      assert.match(expectScimError(answer, 400, 'invalidValue').detail, /emails/, JSON.stringify(operation));
    }
    const read = await scim('GET', path);
    assert.equal(read.body.meta.version, version);
    assert.equal(read.body.title, undefined);
    assert.deepEqual(primaries(read.body), ['a@primary.example']);
  });

  test('an extension object holds only its own attributes: a core attribute in it is ignored, on POST, PUT and PATCH', async () => {
    const [ann] = [await user('ann.ext@example.com')];
    const created = await group('Real', {
      [GROUP_EXTENSION]: { displayName: 'Overridden', members: [{ value: ann.id }], environment: 'production' },
    });
    assert.equal(created.displayName, 'Real');
    assert.equal(created[GROUP_EXTENSION].environment, 'production');
    assert.equal(created[GROUP_EXTENSION].displayName, undefined);
    assert.deepEqual(created.members, [], 'members inside the extension object are not members');
    const first = await scim('POST', '/Groups', { [GROUP_EXTENSION]: { displayName: 'Overridden' }, displayName: 'Real' });
    assert.equal(first.body.displayName, 'Real', 'whatever the order of the keys');
    expectScimError(await scim('POST', '/Groups', { [GROUP_EXTENSION]: { displayName: 'Only here' } }), 400, 'invalidValue');
    const prefixed = await scim('POST', '/Groups', { displayName: 'Real', [`${GROUP_EXTENSION}:displayName`]: 'Overridden' });
    assert.equal(prefixed.body.displayName, 'Real', "an extension's URN prefix names that extension's attributes only");
    const path = `/Groups/${created.id}`;
    const put = await scim('PUT', path, { displayName: 'Put', [GROUP_EXTENSION]: { displayName: 'Overridden', role: 'viewer' } });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.body.displayName, 'Put');
    assert.equal(put.body[GROUP_EXTENSION].role, 'viewer');
    expectScimError(
      await scim('PATCH', path, patchOf({ op: 'replace', path: `${GROUP_EXTENSION}:displayName`, value: 'Overridden' })),
      400,
      'invalidPath',
    );
    let answer = await scim(
      'PATCH',
      path,
      patchOf(
        { op: 'replace', path: `${GROUP_EXTENSION}:environment`, value: 'staging' },
        { op: 'replace', value: { [GROUP_EXTENSION]: { displayName: 'Overridden', role: 'developer' } } },
        { op: 'replace', value: { [`${GROUP_EXTENSION}:displayName`]: 'Overridden' } },
      ),
    );
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.displayName, 'Put');
    assert.equal(answer.body[GROUP_EXTENSION].environment, 'staging');
    assert.equal(answer.body[GROUP_EXTENSION].role, 'developer');
    answer = await scim(
      'PATCH',
      path,
      patchOf({ op: 'replace', path: 'urn:ietf:params:scim:schemas:core:2.0:Group:displayName', value: 'Core' }),
    );
    assert.equal(answer.body.displayName, 'Core', 'the core URN prefix names core attributes');
    assert.deepEqual(ids(await find('displayName eq "Overridden"', 'Groups')), []);
  });

  test('a group role is taken in any case and kept in its canonical lower case, as /Schemas says it is not case-exact', async () => {
    const projectId = await server.newProject(caller, 'Roles');
    const member = await user('role.case@example.com');
    const declared = (await scim('GET', `/Schemas/${GROUP_EXTENSION}`)).body.attributes.find(
      (a: { name: string }) => a.name === 'role',
    );
    assert.equal(declared.caseExact, false);
    const created = await group('Role case', { projectId, role: 'ADMIN', members: [{ value: member.id }] });
    assert.equal(created[GROUP_EXTENSION].role, 'admin');
    assert.deepEqual(ids(await find('role eq "Admin"', 'Groups')), ['Role case']);
    const patched = await scim('PATCH', `/Groups/${created.id}`, patchOf({ op: 'replace', path: 'role', value: 'Developer' }));
    assert.equal(patched.status, 200, patched.text);
    assert.equal(patched.body[GROUP_EXTENSION].role, 'developer');
    const row = await server.db.selectFrom('scimGroups').select('role').where('id', '=', created.id).executeTakeFirstOrThrow();
    assert.equal(row.role, 'developer');
    const grants = await server.api('GET', `/directory-integration/users/${member.id}/project-grants`, { token: caller.token });
    assert.deepEqual(grants.body, [{ projectId, projectName: 'Roles', role: 'developer', groupId: created.id }]);
    const put = await scim('PUT', `/Groups/${created.id}`, { displayName: 'Role case', [GROUP_EXTENSION]: { role: 'Viewer' } });
    assert.equal(put.body[GROUP_EXTENSION].role, 'viewer');
    expectScimError(await scim('POST', '/Groups', { displayName: 'x', role: 'Owner' }), 400, 'invalidValue');
  });
});
