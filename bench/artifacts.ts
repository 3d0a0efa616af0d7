import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { loadConfig } from '../src/core/config.ts';
import { migrate, now, openStore } from '../src/core/db/database.ts';
import { startBenchServer, type BenchServer } from './lib.ts';

/**
 * An artifact upload of 5,000 files and 50 MB, then of twice that: throughput against inserting the
 * same bytes into the store directly, and the server's resident memory before and during the upload.
 * Target: peak RSS grows by less than 64 MB for 50 MB and stays flat when the upload doubles.
 */
const BOUNDARY = 'bench-boundary-7d1f0c';

/** The content of file `i`: SQL text of `bytes` bytes. */
function fileContent(i: number, bytes: number): Buffer {
  const line = `select ${i} as id, 'row of file ${i}' as label from dual;\n`;
  return Buffer.from(line.repeat(Math.ceil(bytes / line.length)).slice(0, bytes));
}

/** A multipart body of `files` files of `fileBytes` each, generated as it is sent (the client holds no copy). */
function multipartBody(files: number, fileBytes: number): Readable {
  return Readable.from(
    (function* () {
      for (let i = 0; i < files; i += 1) {
        const name = `pipelines/folder-${i % 50}/file-${i}.sql`;
        yield Buffer.from(
          `--${BOUNDARY}\r\ncontent-disposition: form-data; name="${name}"; filename="file-${i}.sql"\r\ncontent-type: text/plain\r\n\r\n`,
        );
        yield fileContent(i, fileBytes);
        yield Buffer.from('\r\n');
      }
      yield Buffer.from(`--${BOUNDARY}--\r\n`);
    })(),
  );
}

/** Uploads through the API while sampling the server's RSS; MB/s and the memory seen. */
async function upload(server: BenchServer, projectId: string, versionName: string, files: number, fileBytes: number) {
  const before = server.memory().rssMb;
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, server.memory().rssMb)), 10);
  const started = performance.now();
  const response = await fetch(`${server.url}/dpc/v1/projects/${projectId}/artifacts`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${server.token}`,
      'content-type': `multipart/form-data; boundary=${BOUNDARY}`,
      versionName,
      environmentName: 'bench',
    },
    body: Readable.toWeb(multipartBody(files, fileBytes)) as ReadableStream,
    duplex: 'half',
  } as RequestInit);
  const text = await response.text();
  const seconds = (performance.now() - started) / 1000;
  clearInterval(sampler);
  peak = Math.max(peak, server.memory().rssMb);
  if (!response.ok) throw new Error(`upload failed: ${response.status} ${text}`);
  return { mbPerSecond: (files * fileBytes) / 1e6 / seconds, seconds, before, peak };
}

/** The same rows written straight into a fresh SQLite store in one transaction, as the server commits them. */
async function directWrite(files: number, fileBytes: number) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dpc-bench-direct-'));
  const store = openStore({ ...loadConfig({}), dataDir, databaseUrl: undefined });
  try {
    await migrate(store);
    const at = now();
    await store.db.insertInto('accounts').values({ id: 'a', name: 'bench', createdAt: at }).execute();
    await store.db
      .insertInto('projects')
      .values({ id: 'p', accountId: 'a', name: 'bench', description: null, createdBy: 'bench', createdAt: at })
      .execute();
    await store.db
      .insertInto('environments')
      .values({ id: 'e', projectId: 'p', name: 'bench', description: null, defaultAgentId: null, createdAt: at })
      .execute();
    const started = performance.now();
    await store.db.transaction().execute(async (trx) => {
      const { id } = await trx
        .insertInto('artifacts')
        .values({
          projectId: 'p',
          environmentId: 'e',
          versionName: 'direct',
          branch: null,
          commitHash: null,
          provider: 'upload',
          enabled: 1,
          createdAt: at,
          deployedAt: at,
        })
        .returning('id')
        .executeTakeFirstOrThrow();
      const batchRows = Math.max(1, Math.min(500, Math.floor((4 * 1024 * 1024) / fileBytes)));
      for (let i = 0; i < files; i += batchRows) {
        const rows = [];
        for (let j = i; j < Math.min(files, i + batchRows); j += 1)
          rows.push({ artifactId: id, path: `pipelines/folder-${j % 50}/file-${j}.sql`, content: fileContent(j, fileBytes) });
        await trx.insertInto('artifactAssets').values(rows).execute();
      }
    });
    const seconds = (performance.now() - started) / 1000;
    return { mbPerSecond: (files * fileBytes) / 1e6 / seconds, seconds };
  } finally {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function bench(): Promise<void> {
  const growths: number[] = [];
  for (const [files, label] of [
    [5_000, '5,000 files / 50 MB'],
    [10_000, '10,000 files / 100 MB'],
  ] as const) {
    // A fresh server for each size, so that each growth is measured from the same idle state.
    const server = await startBenchServer();
    try {
      const { projectId } = await server.api('POST', '/projects', { name: 'bench' });
      await server.api('POST', `/projects/${projectId}/environments`, { name: 'bench' });
      const fileBytes = 10_000;
      const api = await upload(server, projectId, `v-${files}`, files, fileBytes);
      const direct = await directWrite(files, fileBytes);
      const growth = api.peak - api.before;
      growths.push(growth);
      console.log(
        `upload ${label} (SQLite): ${api.mbPerSecond.toFixed(1)} MB/s (${api.seconds.toFixed(1)} s)` +
          ` | direct store write ${direct.mbPerSecond.toFixed(1)} MB/s | ratio ${(api.mbPerSecond / direct.mbPerSecond).toFixed(2)}` +
          ` | server RSS idle ${api.before.toFixed(0)} MB, peak during ${api.peak.toFixed(0)} MB, growth ${growth.toFixed(0)} MB (target < 64 MB)`,
      );
    } finally {
      await server.stop();
    }
  }
  const flat = growths[1] - growths[0];
  console.log(`peak growth at double size: ${flat >= 0 ? '+' : ''}${flat.toFixed(0)} MB against 50 MB (target: flat)`);
}
