import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeOnPostgres, TestServer, type Caller } from '../helpers/harness.ts';

/**
 * Attack finding F10: on PostgreSQL an event is readable once every older transaction has ended (the safe
 * point, docs/events.md). A webhook's event held back by a long transaction is delivered promptly once that
 * transaction ends: the fan-out reads again while events are held back (it does not wait for its poll), and the
 * delivery job it commits is taken at once (not at the job queue's next poll).
 */
describeOnPostgres('a webhook held back by a long transaction', () => {
  let server: TestServer;
  let caller: Caller;
  let receiver: http.Server;
  let url: string;
  const arrivals: { at: number; type: string }[] = [];
  before(async () => {
    // The poll settings as deployed (DPC_EVENTS_POLL_MS and the job queue's defaults).
    server = await TestServer.start('postgres', { outboundAllowedRanges: ['127.0.0.1'], eventsPollMs: 1000 });
    caller = await server.newAccount();
    receiver = http.createServer((request, response) => {
      const type = String(request.headers['x-event-type']);
      request.resume().on('end', () => {
        arrivals.push({ at: Date.now(), type });
        response.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
  });
  after(async () => {
    receiver.closeAllConnections();
    await new Promise((resolve) => receiver.close(resolve));
    await server.close();
  });

  test('is delivered within 250 ms of the blocking transaction ending', async () => {
    const created = await server.api('POST', '/webhooks', {
      token: caller.token,
      body: { url, eventTypes: ['projects.created'] },
    });
    assert.equal(created.status, 201, created.text);
    const lateness: number[] = [];
    for (let round = 0; round < 3; round += 1) {
      // Another session's write transaction, older than the event, held open.
      const blocker = new pg.Client({ connectionString: server.config.databaseUrl });
      await blocker.connect();
      try {
        await blocker.query('begin');
        await blocker.query('select pg_current_xact_id()');
        const project = await server.api('POST', '/projects', { token: caller.token, body: { name: `held back ${round}` } });
        assert.equal(project.status, 201, project.text);
        await new Promise((resolve) => setTimeout(resolve, 1200));
        assert.equal(arrivals.length, round, 'nothing is delivered while the older transaction runs');
        await blocker.query('commit');
      } finally {
        await blocker.end();
      }
      const ended = Date.now();
      const deadline = ended + 15_000;
      while (arrivals.length === round && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
      assert.equal(arrivals.length, round + 1, 'delivered once the older transaction ended');
      lateness.push(arrivals[round].at - ended);
    }
    console.log(`# delivered ${lateness.join(', ')} ms after the blocking transaction ended`);
    assert.ok(
      lateness.every((ms) => ms <= 250),
      `delivered ${lateness.join(', ')} ms after the blocking transaction ended`,
    );
  });
});
