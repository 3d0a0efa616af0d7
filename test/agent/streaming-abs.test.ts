import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { BlobServiceClient, StorageSharedKeyCredential, type ContainerClient } from '@azure/storage-blob';
import { freePort } from '../helpers/processes.ts';
import {
  eventsOfText,
  onceAcrossAKill,
  sourceDefinition,
  startLogicalSource,
  StreamingRig,
  tempDir,
  until,
  type ChangeEvent,
  type LogicalSource,
} from '../helpers/streaming.ts';

/**
 * An `abs` target: the agent (a real process) writes its change files to an Azure Blob container through
 * @azure/storage-blob with the account key from its vault, here to Azurite on loopback (the agent is given
 * its endpoint with DPC_AGENT_BLOB_ENDPOINT). Snapshot, insert, update, delete; a kill -9 mid-stream and a
 * restart leave each change in the container once. The server's store plays no part, so SQLite only.
 */

// Azurite's development account, as documented by Azure.
const ACCOUNT = 'devstoreaccount1';
const KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

let rig: StreamingRig;
let source: LogicalSource;
let azurite: ChildProcess;
let azuriteDir: string;
let container: ContainerClient;

/** Every event in the container under `cdc/public/<table>/`, blobs in name order. */
async function eventsOf(table: string): Promise<ChangeEvent[]> {
  const names: string[] = [];
  for await (const blob of container.listBlobsFlat({ prefix: `cdc/public/${table}/` })) names.push(blob.name);
  const events: ChangeEvent[] = [];
  for (const name of names.sort()) {
    // A restarted agent removes a blob written after its committed position: listed a moment ago, gone now.
    const body = await container
      .getBlobClient(name)
      .downloadToBuffer()
      .catch((error: { statusCode?: number }) => {
        if (error.statusCode === 404) return undefined;
        throw error;
      });
    if (!body) continue;
    events.push(...eventsOfText(body.toString('utf8')));
  }
  return events;
}

before(async () => {
  azuriteDir = tempDir('dpc-azurite-');
  const port = await freePort();
  azurite = spawn(
    path.resolve('node_modules/.bin/azurite-blob'),
    [
      '--blobHost',
      '127.0.0.1',
      '--blobPort',
      String(port),
      '--inMemoryPersistence',
      '--disableTelemetry',
      '--skipApiVersionCheck',
      '--silent',
    ],
    // In memory; its working folder (where it would put anything else) is the test's own.
    { stdio: 'ignore', cwd: azuriteDir },
  );
  const endpoint = `http://127.0.0.1:${port}`;
  container = new BlobServiceClient(`${endpoint}/${ACCOUNT}`, new StorageSharedKeyCredential(ACCOUNT, KEY)).getContainerClient(
    'lake',
  );
  await until('Azurite answers', async () => (await container.createIfNotExists(), true), {
    ignoreErrors: true,
    intervalMs: 150,
  });
  source = await startLogicalSource([
    'CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL)',
    "INSERT INTO orders VALUES (1, 'apple'), (2, 'bread')",
  ]);
  rig = await StreamingRig.start({
    agentEnv: { DPC_AGENT_BLOB_ENDPOINT: `${endpoint}/{account}` },
    secrets: { 'cdc-source': source.cluster.password, 'lake-key': KEY },
    stateDirPrefix: 'dpc-agent-abs-',
  });
});

after(async () => {
  await rig?.close();
  azurite?.kill('SIGKILL');
  await source?.stop();
  if (azuriteDir) rmSync(azuriteDir, { recursive: true, force: true });
});

test('change files reach an Azure Blob container (Azurite); after a kill -9 and a restart, each change is there once', async () => {
  const pipelineId = await rig.createPipeline({
    name: 'orders-to-abs',
    streamingSource: sourceDefinition(source.cluster, ['orders']),
    streamingTarget: {
      type: 'abs',
      accountName: ACCOUNT,
      accountKey: { secretName: 'lake-key', secretKey: 'password' },
      container: 'lake',
      prefix: 'cdc',
    },
  });
  await rig.startStreaming(pipelineId);
  await onceAcrossAKill(rig, source, pipelineId, eventsOf);
});
