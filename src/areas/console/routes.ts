import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ProblemError } from '../../core/problems.ts';

/** One file the console serves, read once at start: its bytes, their gzip, its type and its ETag. */
export interface ConsoleAsset {
  body: Buffer;
  gzipped: Buffer;
  type: string;
  etag: string;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

/**
 * The page may load only what this server serves: no inline script, no other origin (no CDN, no font),
 * no framing. The API is same-origin, so connect-src 'self' is enough.
 */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

function filesUnder(root: string, prefix: string, into: Map<string, ConsoleAsset>): void {
  for (const entry of readdirSync(root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const type = TYPES[path.extname(entry.name)];
    if (!type) continue;
    const full = path.join(entry.parentPath, entry.name);
    const body = readFileSync(full);
    const name = prefix + path.relative(root, full).split(path.sep).join('/');
    into.set(name, {
      body,
      gzipped: gzipSync(body, { level: 9 }),
      type,
      etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`,
    });
  }
}

/**
 * Every file of the console: the hand-written modules and styles of static/, and the YAML parser's browser
 * build (the `yaml` package the server depends on) under vendor/yaml/, which draws a pipeline's graph from
 * its file. Nothing is built: the files are ES modules served as they are.
 */
export function consoleAssets(): Map<string, ConsoleAsset> {
  const assets = new Map<string, ConsoleAsset>();
  filesUnder(path.join(path.dirname(fileURLToPath(import.meta.url)), 'static'), '', assets);
  const yamlRoot = path.join(path.dirname(createRequire(import.meta.url).resolve('yaml/package.json')), 'browser');
  filesUnder(yamlRoot, 'vendor/yaml/', assets);
  return assets;
}

function send(request: FastifyRequest, reply: FastifyReply, asset: ConsoleAsset) {
  reply
    .headers(SECURITY_HEADERS)
    .header('etag', asset.etag)
    .header('cache-control', 'no-cache')
    .header('vary', 'accept-encoding');
  if (request.headers['if-none-match'] === asset.etag) return reply.code(304).send();
  reply.type(asset.type);
  if (/\bgzip\b/.test(String(request.headers['accept-encoding'] ?? ''))) {
    return reply.header('content-encoding', 'gzip').send(asset.gzipped);
  }
  return reply.send(asset.body);
}

/** The web console at /dpc/console/ (and / sends there): static files; every page uses the public API only. */
export async function consoleRoutes(app: FastifyInstance): Promise<void> {
  const assets = consoleAssets();
  const index = assets.get('index.html')!;
  const hidden = { schema: { hide: true } };
  app.get('/', hidden, async (_request, reply) => reply.redirect('/dpc/console/'));
  app.get('/dpc/console', hidden, async (_request, reply) => reply.redirect('/dpc/console/'));
  app.get('/dpc/console/', hidden, async (request, reply) => send(request, reply, index));
  app.get<{ Params: { '*': string } }>('/dpc/console/*', hidden, async (request, reply) => {
    const asset = assets.get(request.params['*']);
    if (!asset) throw new ProblemError(404, 'The console has no such file.');
    return send(request, reply, asset);
  });
}
