import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { freePort } from '../helpers/processes.ts';
import {
  eventsOfText,
  onceAcrossAKill,
  sourceDefinition,
  startLogicalSource,
  StreamingRig,
  tempDir,
  type ChangeEvent,
  type LogicalSource,
} from '../helpers/streaming.ts';

/**
 * An `s3` target on an S3-compatible store: the agent (a real process) is given `--object-store
 * http://127.0.0.1:<port>` (here through DPC_AGENT_OBJECT_STORE) and writes its change files through
 * @aws-sdk/client-s3 to an S3 stand-in on loopback (s3rver), with credentials from its environment. The
 * server's store plays no part in what reaches the bucket, so this runs on SQLite only.
 */

let rig: StreamingRig;
let source: LogicalSource;
let s3: S3rver;
let s3Dir: string;
let client: S3Client;
const S3_ENV = { AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' };

/** Every event in the bucket under `cdc/public/<table>/`, objects in key order. */
async function eventsOf(table: string): Promise<ChangeEvent[]> {
  const prefix = `cdc/public/${table}/`;
  const listed = await client.send(new ListObjectsV2Command({ Bucket: 'lake', Prefix: prefix }));
  const keys = (listed.Contents ?? []).map((object) => object.Key!).sort();
  const events: ChangeEvent[] = [];
  for (const key of keys) {
    // A restarted agent removes a file written after its committed position: listed a moment ago, gone now.
    const object = await client.send(new GetObjectCommand({ Bucket: 'lake', Key: key })).catch((error: Error) => {
      if (error.name === 'NoSuchKey') return undefined;
      throw error;
    });
    if (!object) continue;
    events.push(...eventsOfText(await object.Body!.transformToString()));
  }
  return events;
}

before(async () => {
  s3Dir = tempDir('dpc-s3rver-');
  const port = await freePort();
  s3 = new S3rver({ address: '127.0.0.1', port, silent: true, directory: s3Dir, configureBuckets: [{ name: 'lake' }] });
  await s3.run();
  const endpoint = `http://127.0.0.1:${port}`;
  client = new S3Client({
    endpoint,
    forcePathStyle: true,
    region: 'us-east-1',
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
  });
  source = await startLogicalSource([
    'CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL)',
    "INSERT INTO orders VALUES (1, 'apple'), (2, 'bread')",
  ]);
  rig = await StreamingRig.start({
    agentEnv: { DPC_AGENT_OBJECT_STORE: endpoint, ...S3_ENV },
    secrets: { 'cdc-source': source.cluster.password },
    stateDirPrefix: 'dpc-agent-s3-',
  });
});

after(async () => {
  await rig?.close();
  await source?.stop();
  client?.destroy();
  await s3?.close();
  if (s3Dir) rmSync(s3Dir, { recursive: true, force: true });
});

test('change files reach an S3-compatible bucket; after a kill -9 and a restart, each change is there once', async () => {
  const { sql } = source;
  const pipelineId = await rig.createPipeline({
    name: 'orders-to-s3',
    streamingSource: sourceDefinition(source.cluster, ['orders']),
    streamingTarget: { type: 's3', bucket: 'lake', prefix: 'cdc' },
  });
  await rig.startStreaming(pipelineId);
  await onceAcrossAKill(rig, source, pipelineId, eventsOf);

  // SIGTERM with a pipeline running: the agent ends the run cleanly and exits 0; the pipeline stays RUNNING,
  // to be resumed by the next agent (its work is delivered again once the lease lapses).
  rig.agent!.child.kill('SIGTERM');
  assert.equal(await rig.agent!.exited, 0, rig.agent!.logs());
  assert.equal((await rig.status(pipelineId)).status, 'RUNNING');
  await sql.query("INSERT INTO orders VALUES (1000, 'after the restart')");
  await rig.startAgent();
  const resumed = await rig.until('the change made while the agent was down arrives', async () => {
    const current = await eventsOf('orders');
    return current.length >= 306 && current;
  });
  assert.equal(resumed.length, 306);
  assert.deepEqual(resumed.at(-1)!.after, { id: 1000, item: 'after the restart' });
});
