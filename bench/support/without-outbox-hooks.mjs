// Module hooks of without-outbox.mjs: src/core/outbox.ts, as tsx compiled it, with emit() returning at once.
const EMIT = /(async function emit\(trx,\s*event\)\s*\{)/;

export async function load(url, context, nextLoad) {
  const loaded = await nextLoad(url, context);
  if (!url.split('?')[0].endsWith('/src/core/outbox.ts')) return loaded;
  const source = String(loaded.source);
  // Fail loudly rather than measure the outbox against itself.
  if (!EMIT.test(source)) throw new Error('bench/support/without-outbox: emit() not found in src/core/outbox.ts');
  return { ...loaded, source: source.replace(EMIT, '$1 return;') };
}
