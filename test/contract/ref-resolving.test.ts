import assert from 'node:assert/strict';
import { test } from 'node:test';
import SwaggerParser from '@apidevtools/swagger-parser';
import { TestServer } from '../helpers/harness.ts';

/** Where a `$ref` member sits that is not a reference into the document itself ("#/..."), by JSON pointer. */
function foreignReferences(value: unknown, at = '', inData = false): string[] {
  if (Array.isArray(value)) return value.flatMap((item, index) => foreignReferences(item, `${at}/${index}`, inData));
  if (!value || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([key, item]) => {
    const here = `${at}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    // In example data any `$ref` member is one too many: ref-resolving tools follow it all the same.
    if (key === '$ref' && (inData || typeof item !== 'string' || !item.startsWith('#'))) return [here];
    const data = inData || key === 'examples' || key === 'example' || key === 'default' || key === 'const' || key === 'enum';
    return foreignReferences(item, here, data);
  });
}

/**
 * Tools that resolve references in an OpenAPI document (Stoplight Prism, swagger-parser, every
 * json-schema-ref-parser user) load the served document: no example holds a `$ref` member they would try
 * to download, and swagger-parser's validate (which resolves every reference) finds no error.
 */
test('the served OpenAPI document loads in a ref-resolving parser', async (t) => {
  const server = await TestServer.start('sqlite');
  t.after(() => server.close());
  const answer = await server.request('GET', '/dpc/openapi.json');
  assert.equal(answer.status, 200);
  assert.deepEqual(foreignReferences(answer.body), []);
  // validate() resolves (and would fetch) every reference, then checks the document against the OpenAPI schema.
  const validated = await SwaggerParser.validate(structuredClone(answer.body));
  assert.equal((validated as { openapi?: string }).openapi, answer.body.openapi);
});
