import assert from 'node:assert/strict';
import http, { type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { multipartParts } from '../../src/core/multipart.ts';
import { ProblemError } from '../../src/core/problems.ts';

const BOUNDARY = 'test-boundary-41c9';

/** The bytes of a multipart body of `parts` ([name, content, filename?]). */
function multipartBody(parts: [string, Buffer | string, string?][], { closed = true } = {}): Buffer {
  const pieces: Buffer[] = [];
  for (const [name, content, filename] of parts) {
    const disposition = `form-data; name="${name}"${filename ? `; filename="${filename}"` : ''}`;
    pieces.push(Buffer.from(`--${BOUNDARY}\r\ncontent-disposition: ${disposition}\r\ncontent-type: text/plain\r\n\r\n`));
    pieces.push(Buffer.from(content));
    pieces.push(Buffer.from('\r\n'));
  }
  if (closed) pieces.push(Buffer.from(`--${BOUNDARY}--\r\n`));
  return Buffer.concat(pieces);
}

interface Seen {
  name: string;
  contentType: string;
  content: Buffer;
  /** Bytes the server had read off the socket when the part was taken. */
  socketBytesRead: number;
}

/**
 * Sends `body` (in the pieces given, each written apart) to a loopback server that reads it with
 * multipartParts, reading each part `turns` event loop turns after taking it; answers what the server
 * saw, or the problem it failed with.
 */
async function readOnServer(
  body: Buffer | Buffer[],
  {
    maxParts = 100_000,
    maxPartBytes = 1e6,
    maxBytes = 1e9,
    turns = 0,
    contentType = `multipart/form-data; boundary=${BOUNDARY}`,
  } = {},
): Promise<{ parts: Seen[]; problem?: ProblemError }> {
  let result!: Promise<{ parts: Seen[]; problem?: ProblemError }>;
  const server = http.createServer((request: IncomingMessage, response) => {
    result = (async () => {
      const parts: Seen[] = [];
      try {
        for await (const part of multipartParts(request, { maxParts, maxPartBytes, maxBytes })) {
          const socketBytesRead = request.socket.bytesRead;
          // A reader that does I/O per part, such as writing it to a file, lets the event loop turn.
          for (let turn = 0; turn < turns; turn += 1) await new Promise((resolve) => setImmediate(resolve));
          parts.push({ name: part.name, contentType: part.contentType, content: Buffer.concat(part.content), socketBytesRead });
        }
        return { parts };
      } catch (error) {
        if (!(error instanceof ProblemError)) throw error;
        return { parts, problem: error };
      } finally {
        response.end();
      }
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as AddressInfo;
    const pieces = Array.isArray(body) ? body : [body];
    await new Promise<void>((resolve) => {
      const request = http.request({ port, host: '127.0.0.1', method: 'POST', headers: { 'content-type': contentType } });
      request.on('response', (response) => response.resume().on('end', resolve));
      request.on('error', () => resolve()); // the server may close without reading the rest of the body
      const send = (i: number) => {
        if (i === pieces.length) return void request.end();
        request.write(pieces[i]);
        setTimeout(() => send(i + 1), Array.isArray(body) ? 20 : 0);
      };
      send(0);
    });
    return await result;
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

describe('multipart reading', () => {
  test('parts come in order with their names and bytes as sent, with or without a filename', async () => {
    const latin1 = Buffer.from([0x63, 0x61, 0x66, 0xe9]);
    const untyped = Buffer.from(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="untyped.sql"\r\n\r\nselect 2;\r\n`);
    const body = multipartBody([
      ['a/one.sql', 'select 1;', 'one.sql'],
      ['no-filename.txt', latin1],
      ['empty.txt', '', 'empty.txt'],
      ['back\\slash.sql', 'x', 'name=wrong.sql'],
    ]);
    const { parts, problem } = await readOnServer(Buffer.concat([untyped, body]));
    assert.equal(problem, undefined);
    assert.deepEqual(
      parts.map((p) => [p.name, p.contentType, p.content]),
      [
        ['untyped.sql', 'text/plain', Buffer.from('select 2;')],
        ['a/one.sql', 'text/plain', Buffer.from('select 1;')],
        ['no-filename.txt', 'text/plain', latin1],
        ['empty.txt', 'text/plain', Buffer.alloc(0)],
        ['back\\slash.sql', 'text/plain', Buffer.from('x')],
      ],
    );
  });

  test('a body arriving in pieces split anywhere, even inside the closing boundary, reads the same', async () => {
    const body = multipartBody([
      ['a.txt', 'aaaa'],
      ['b.txt', 'bbbb'],
    ]);
    const cuts = [
      3,
      body.indexOf('aaaa') + 2,
      body.indexOf('\r\n--', body.indexOf('aaaa')) + 1,
      body.length - 4,
      body.length - 2,
    ];
    const pieces = [0, ...cuts].map((from, i) => body.subarray(from, cuts[i] ?? body.length));
    const { parts, problem } = await readOnServer(pieces);
    assert.equal(problem, undefined);
    assert.deepEqual(
      parts.map((p) => [p.name, p.content.toString()]),
      [
        ['a.txt', 'aaaa'],
        ['b.txt', 'bbbb'],
      ],
    );
  });

  test('the body is read only as fast as the parts are taken, however small the parts', async () => {
    // 8 MB of 1 KB parts: a reader that queued parsed parts would have read the whole body by the first.
    const count = 8_000;
    const body = multipartBody(Array.from({ length: count }, (_, i) => [`p/${i}.txt`, 'x'.repeat(1000), `${i}.txt`]));
    const { parts, problem } = await readOnServer(body, { turns: 2 });
    assert.equal(problem, undefined);
    assert.equal(parts.length, count);
    const partBytes = body.length / count;
    const readAhead = Math.max(...parts.map((part, i) => part.socketBytesRead - (i + 1) * partBytes));
    assert.ok(readAhead < 512 * 1024, `read ${readAhead} bytes ahead of the part taken`);
  });

  test('a body cut off before its closing boundary, between parts or inside one, is refused (400)', async () => {
    const parts: [string, string][] = [
      ['a.txt', 'aaa'],
      ['b.txt', 'bbb'],
    ];
    const between = await readOnServer(multipartBody(parts, { closed: false }));
    assert.equal(between.problem?.status, 400);
    assert.match(between.problem!.message, /closing boundary/);
    const whole = multipartBody(parts);
    const inside = await readOnServer(whole.subarray(0, whole.indexOf('bbb') + 1));
    assert.equal(inside.problem?.status, 400);
  });

  test('malformed bodies are refused (400): no opening boundary, an endless part header, a header not in UTF-8', async () => {
    const endlessHeader = Buffer.from(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="${'a'.repeat(20_000)}"`);
    const latin1Header = Buffer.concat([
      Buffer.from(`--${BOUNDARY}\r\ncontent-disposition: form-data; name="caf`),
      Buffer.from([0xe9]),
      Buffer.from(`"\r\n\r\nx\r\n--${BOUNDARY}--\r\n`),
    ]);
    for (const body of [Buffer.from('not multipart at all'), endlessHeader, latin1Header]) {
      const { problem } = await readOnServer(body);
      assert.equal(problem?.status, 400, body.subarray(0, 60).toString());
    }
  });

  test('no boundary is 400; more parts, a larger part or more bytes than allowed is 413', async () => {
    const body = multipartBody([['a.txt', 'a']]);
    const noBoundary = await readOnServer(body, { contentType: 'multipart/form-data' });
    assert.equal(noBoundary.problem?.status, 400);
    const tooMany = await readOnServer(
      multipartBody([
        ['a', '1'],
        ['b', '2'],
        ['c', '3'],
      ]),
      { maxParts: 2 },
    );
    assert.equal(tooMany.problem?.status, 413);
    assert.ok(tooMany.parts.length <= 2);
    const parts: [string, string][] = [
      ['a', 'x'.repeat(10)],
      ['b', 'x'.repeat(10)],
    ];
    assert.equal((await readOnServer(multipartBody(parts), { maxPartBytes: 9 })).problem?.status, 413);
    assert.equal((await readOnServer(multipartBody(parts), { maxBytes: 19 })).problem?.status, 413);
    assert.equal((await readOnServer(multipartBody(parts), { maxPartBytes: 10, maxBytes: 20 })).parts.length, 2);
  });

  test('the 413 for a part over the limit names that part, however the body is cut into chunks', async () => {
    const body = multipartBody([
      ['small.txt', 'x'.repeat(5)],
      ['pipelines/big one.orch.yaml', 'y'.repeat(50)],
      ['after.txt', 'z'],
    ]);
    for (const cut of [5, 13, 29, body.length]) {
      const pieces: Buffer[] = [];
      for (let at = 0; at < body.length; at += cut) pieces.push(body.subarray(at, at + cut));
      const { problem } = await readOnServer(pieces, { maxPartBytes: 20 });
      assert.equal(problem?.status, 413);
      assert.equal(problem?.message, 'The part "pipelines/big one.orch.yaml" is larger than 20 bytes.', `cut ${cut}`);
    }
  });
});
