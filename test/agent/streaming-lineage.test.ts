import assert from 'node:assert/strict';
import { readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { describeEachStore } from '../helpers/harness.ts';
import { assertRunEvent } from '../helpers/openlineage.ts';
import {
  folderEvents,
  sourceDefinition,
  startLogicalSource,
  snowflakeTarget,
  STAND_IN_PRIVATE_KEY,
  StreamingRig,
  tempDir,
  warehouseBeside,
  type LogicalSource,
} from '../helpers/streaming.ts';

/**
 * The lineage of streaming pipelines (issue 34: "files of streaming targets"), from a real agent: a server,
 * the reference agent as a process, a PostgreSQL source cluster with wal_level=logical. A pipeline to a
 * folder (an `s3` target the agent serves from `--object-store file://...`) and one to warehouse tables (a
 * `snowflake` target, the agent's warehouse PostgreSQL) each run, see changes and are stopped; the lineage
 * events of each run (GET /lineage/events) are OpenLineage RunEvents of the streaming job: START, RUNNING as
 * a table gets its first rows, COMPLETE once stopped, from the source tables to where their changes went.
 */

describeEachStore('streaming lineage from a real agent: source tables → change files and warehouse tables', (kind) => {
  let rig: StreamingRig;
  let source: LogicalSource;
  let warehouse: pg.Client;
  let lakeDir: string;
  const since = new Date(Date.now() - 60_000).toISOString();

  before(async () => {
    source = await startLogicalSource([
      'CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL)',
      'CREATE TABLE notes (id integer PRIMARY KEY, body text)',
      "INSERT INTO orders VALUES (1, 'apple'), (2, 'bread'), (3, 'cheese')",
    ]);
    let warehouseUrl: string;
    ({ url: warehouseUrl, client: warehouse } = await warehouseBeside(source));
    lakeDir = tempDir('dpc-lake-lineage-');
    rig = await StreamingRig.start({
      kind,
      agentEnv: { DPC_AGENT_OBJECT_STORE: pathToFileURL(lakeDir).href, DPC_AGENT_WAREHOUSE_URL: warehouseUrl },
      secrets: {
        'cdc-source': source.cluster.password,
        'snowflake-key': STAND_IN_PRIVATE_KEY,
      },
    });
  });

  after(async () => {
    await rig?.close();
    await warehouse?.end().catch(() => undefined);
    await source?.stop();
    if (lakeDir) rmSync(lakeDir, { recursive: true, force: true });
  });

  /** The lineage events of the job `name`, oldest first, each checked against the OpenLineage schema. */
  async function lineageOf(name: string) {
    const page = await rig.api('GET', `/lineage/events?generatedFrom=${since}&size=100`);
    assert.equal(page.status, 200, page.text);
    const events = page.body.results
      .map((result: { event: any }) => result.event)
      .filter((event: any) => event.job.name === name);
    for (const event of events) assertRunEvent(event);
    return events;
  }

  const datasets = (list: { namespace: string; name: string }[]) => list.map((dataset) => `${dataset.namespace} ${dataset.name}`);
  const input = (table: string) => `postgres://${source.cluster.host}:${source.cluster.port} postgres.public.${table}`;

  test('a run to a folder, through a kill -9 of its agent: START with every table, RUNNING as each gets its first rows, COMPLETE once stopped; the outputs are where the files are', async () => {
    const id = await rig.createPipeline({
      name: 'orders-to-folder',
      advancedProperties: { 'snapshot.mode': 'initial' },
      streamingSource: sourceDefinition(source.cluster, ['orders', 'notes']),
      streamingTarget: { type: 's3', bucket: 'lake', prefix: 'cdc/' },
    });
    await rig.startStreaming(id);
    await source.sql.query("INSERT INTO notes VALUES (1, 'first note')");
    await rig.until(
      'the note is in its folder',
      () => folderEvents(path.join(lakeDir, 'lake', 'cdc', 'public', 'notes')).length === 1,
    );
    await rig.until('the status counts it', async () => (await rig.status(id)).rowsPerTable?.['public.notes'] === 1);
    // A kill -9 and a restart: the run is delivered again and goes on; it is still the one run, started once.
    await rig.killAgent();
    await source.sql.query("INSERT INTO notes VALUES (2, 'second note')");
    await rig.startAgent();
    await rig.until(
      'the run goes on after the restart',
      async () => (await rig.status(id)).rowsPerTable?.['public.notes'] === 2,
      60_000,
    );
    await rig.stop(id);

    const events = await lineageOf('orders-to-folder');
    const both = {
      inputs: [input('orders'), input('notes')],
      outputs: ['s3://lake cdc/public/orders', 's3://lake cdc/public/notes'],
    };
    assert.deepEqual(
      events.map((event: any) => ({ type: event.eventType, inputs: datasets(event.inputs), outputs: datasets(event.outputs) })),
      [
        { type: 'START', ...both },
        { type: 'RUNNING', inputs: [input('orders')], outputs: ['s3://lake cdc/public/orders'] },
        { type: 'RUNNING', inputs: [input('notes')], outputs: ['s3://lake cdc/public/notes'] },
        { type: 'COMPLETE', ...both },
      ],
    );
    assert.equal(new Set(events.map((event: any) => event.run.runId)).size, 1, 'one run');
    assert.equal(events[0].job.namespace, `dpc://${rig.caller.accountId}.${rig.projectId}`);
    assert.equal(events[0].job.facets.jobType.processingType, 'STREAMING');
    // Each output names the folder (in the bucket the agent's object store serves) that holds its table's change files.
    for (const output of events[0].outputs) {
      const folder = path.join(lakeDir, output.namespace.replace('s3://', ''), output.name);
      assert.ok(
        readdirSync(folder).some((file) => file.endsWith('.jsonl')),
        `${output.namespace}/${output.name} holds change files`,
      );
    }
  });

  test('a run to warehouse tables: START, RUNNING and COMPLETE from the source table to the target table', async () => {
    const id = await rig.createPipeline({
      name: 'orders-to-warehouse',
      advancedProperties: { 'snapshot.mode': 'initial' },
      streamingSource: sourceDefinition(source.cluster, ['orders']),
      streamingTarget: snowflakeTarget('raw_cdc'),
    });
    await rig.startStreaming(id);
    assert.equal((await warehouse.query('SELECT count(*)::int AS n FROM raw_cdc.orders')).rows[0].n, 3);
    await rig.stop(id);

    const events = await lineageOf('orders-to-warehouse');
    const table = { inputs: [input('orders')], outputs: ['snowflake://acme-eu1 RAW.raw_cdc.orders'] };
    assert.deepEqual(
      events.map((event: any) => ({ type: event.eventType, inputs: datasets(event.inputs), outputs: datasets(event.outputs) })),
      [
        { type: 'START', ...table },
        { type: 'RUNNING', ...table },
        { type: 'COMPLETE', ...table },
      ],
    );
    assert.equal(new Set(events.map((event: any) => event.run.runId)).size, 1, 'one run');
  });
});
