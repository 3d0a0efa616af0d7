import { randomUUID } from 'node:crypto';
import { openStore } from '../src/core/db/database.ts';
import { median, record, startBenchServer, type BenchServer } from './lib.ts';

const BASE = '/dpc/v1/directory-integration/scim/v2';
const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
const LARGE = 10_000;
const SMALL = 10;
/** PATCHes timed per group, one after another, each adding a user not yet in it. */
const SAMPLES = 300;
const WARM_UP = 30;

/** `count` users of the account straight through the store, in one transaction; their ids. */
async function seedUsers(server: BenchServer, accountId: string, count: number): Promise<string[]> {
  const store = openStore({ dataDir: server.dataDir, databaseUrl: undefined });
  const time = new Date().toISOString();
  const ids = Array.from({ length: count }, () => randomUUID());
  try {
    await store.db.transaction().execute(async (trx) => {
      for (let start = 0; start < count; start += 1000) {
        const batch = ids.slice(start, start + 1000).map((id, i) => {
          const userName = `user${start + i}@bench.example`;
          return { id, userName, document: JSON.stringify({ userName }) };
        });
        await trx
          .insertInto('scimUsers')
          .values(
            batch.map(({ id, userName, document }) => ({
              id,
              accountId,
              userName,
              userNameKey: userName,
              displayName: null,
              document,
              passwordHash: null,
              version: 1,
              createdAt: time,
              lastModified: time,
            })),
          )
          .execute();
        const values = batch.flatMap(({ id, userName }) => [
          { resourceId: id, accountId, resourceType: 'User', attribute: 'id', element: 0, value: id },
          { resourceId: id, accountId, resourceType: 'User', attribute: 'username', element: 0, value: userName },
        ]);
        for (let i = 0; i < values.length; i += 500)
          await trx
            .insertInto('scimValues')
            .values(values.slice(i, i + 500))
            .execute();
      }
    });
  } finally {
    await store.close();
  }
  return ids;
}

async function seedMembers(server: BenchServer, groupId: string, userIds: string[]): Promise<void> {
  const store = openStore({ dataDir: server.dataDir, databaseUrl: undefined });
  try {
    await store.db.transaction().execute(async (trx) => {
      for (let i = 0; i < userIds.length; i += 500) {
        await trx
          .insertInto('scimGroupMembers')
          .values(userIds.slice(i, i + 500).map((userId) => ({ groupId, userId })))
          .execute();
      }
    });
  } finally {
    await store.close();
  }
}

/** Median latency in ms of PATCHes that each add one of `newcomers` to the group, sent one after another. */
async function addOneMember(
  server: BenchServer,
  token: string,
  groupId: string,
  newcomers: string[],
  query: string,
): Promise<number> {
  const latencies: number[] = [];
  for (const [i, userId] of newcomers.entries()) {
    const started = performance.now();
    const response = await fetch(`${server.url}${BASE}/Groups/${groupId}${query}`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json', accept: 'application/scim+json' },
      body: JSON.stringify({ schemas: [PATCH_OP], Operations: [{ op: 'add', path: 'members', value: [{ value: userId }] }] }),
    });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`PATCH ${groupId}: ${response.status}`);
    if (i >= WARM_UP) latencies.push(performance.now() - started);
  }
  return median(latencies);
}

/**
 * E25: adding one member by PATCH to a group of 10,000 members against the same PATCH on a group of 10.
 * Members live in a table of their own and a PATCH touches only the rows it adds, so the cost should not
 * grow with the group. Answering the whole group (members included, RFC 7644's default) does grow with it,
 * so the target is measured with excludedAttributes=members and the default answer is printed beside it.
 */
export async function bench(): Promise<void> {
  const server = await startBenchServer();
  try {
    const { token } = await server.api('POST', '/directory-integration/tokens', { name: 'bench' });
    const accountId = JSON.parse(Buffer.from(server.token.split('.')[1], 'base64url').toString()).account_id as string;
    const batch = 2 * (SAMPLES + WARM_UP);
    const users = await seedUsers(server, accountId, LARGE + 2 * batch);
    const scim = (path: string, body: unknown) =>
      fetch(`${server.url}${BASE}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/scim+json' },
        body: JSON.stringify(body),
      }).then((r) => r.json() as Promise<{ id: string }>);
    const large = (await scim('/Groups', { displayName: 'ten thousand' })).id;
    const small = (await scim('/Groups', { displayName: 'ten' })).id;
    await seedMembers(server, large, users.slice(0, LARGE));
    await seedMembers(server, small, users.slice(0, SMALL));
    const newcomers = users.slice(LARGE);
    const lean = '?excludedAttributes=members';
    const half = SAMPLES + WARM_UP;
    const atSmall = await addOneMember(server, token, small, newcomers.slice(0, half), lean);
    const atLarge = await addOneMember(server, token, large, newcomers.slice(0, half), lean);
    const ratio = atLarge / atSmall;
    console.log(
      `E25 PATCH add one member (excludedAttributes=members): median ${atLarge.toFixed(2)} ms at ${LARGE} members, ` +
        `${atSmall.toFixed(2)} ms at ${SMALL} | ratio ${ratio.toFixed(2)} (target <= 2)`,
    );
    record({ name: `E25 PATCH add one member, ${LARGE} against ${SMALL} members: latency ratio`, measured: ratio, atMost: 2 });

    const fullSmall = await addOneMember(server, token, small, newcomers.slice(half, 2 * half), '');
    const fullLarge = await addOneMember(server, token, large, newcomers.slice(half, 2 * half), '');
    console.log(
      `E25 PATCH add one member, whole group answered: median ${fullLarge.toFixed(2)} ms at ${LARGE} members, ` +
        `${fullSmall.toFixed(2)} ms at ${SMALL} | ratio ${(fullLarge / fullSmall).toFixed(2)} (no target: the answer lists every member)`,
    );
    record({ name: `E25 PATCH add one member answering all ${LARGE} members: latency ratio`, measured: fullLarge / fullSmall });

    // Okta's and Entra's lookup before every create: one user by userName among all of them.
    const lookups: number[] = [];
    for (let i = 0; i < SAMPLES; i += 1) {
      const filter = encodeURIComponent(`userName eq "user${(i * 37) % LARGE}@bench.example"`);
      const started = performance.now();
      const response = await fetch(`${server.url}${BASE}/Users?filter=${filter}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      const page = (await response.json()) as { totalResults: number };
      if (page.totalResults !== 1) throw new Error(`the lookup found ${page.totalResults} users`);
      if (i >= WARM_UP) lookups.push(performance.now() - started);
    }
    console.log(`GET /Users?filter=userName eq "..." among ${users.length} users: median ${median(lookups).toFixed(2)} ms`);
    record({ name: `SCIM lookup by userName among ${users.length} users: median ms`, measured: median(lookups) });
  } finally {
    await server.stop();
  }
}
