import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { pathToFileURL } from 'node:url';
import { test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import openapiTS, { astToString } from 'openapi-typescript';
import { TestServer } from '../helpers/harness.ts';

/**
 * A client as its users would write it, over the types openapi-typescript generates from the live document:
 * it spells no parameter that has a default, and names body types by their component names.
 */
const CLIENT = `
import createClient from 'openapi-fetch';
import type { components, paths } from './openapi.ts';

type Schemas = components['schemas'];

export async function useTheApi(baseUrl: string, token: string) {
  const client = createClient<paths>({ baseUrl, headers: { authorization: \`Bearer \${token}\` } });
  const request: Schemas['CreateProjectRequest'] = { name: 'Generated client' };
  const created = await client.POST('/dpc/v1/projects', { body: request });
  if (!created.data) throw new Error(\`create project: \${created.response.status}\`);
  const projectId: Schemas['CreateProjectResponse']['projectId'] = created.data.projectId;
  const path = { projectId };
  const environment = await client.POST('/dpc/v1/projects/{projectId}/environments', {
    params: { path },
    body: { name: 'production' },
  });
  const projects = await client.GET('/dpc/v1/projects');
  const page: Schemas['ProjectPage'] | undefined = projects.data;
  const environments = await client.GET('/dpc/v1/projects/{projectId}/environments', { params: { path } });
  const missing = await client.GET('/dpc/v1/projects/{projectId}', {
    params: { path: { projectId: '00000000-0000-4000-8000-000000000000' } },
  });
  const problem: Schemas['ProblemDetail'] | undefined = missing.error;
  return [
    { method: 'post', path: '/dpc/v1/projects', status: created.response.status, body: created.data as unknown },
    { method: 'post', path: '/dpc/v1/projects/{projectId}/environments', status: environment.response.status, body: environment.data },
    { method: 'get', path: '/dpc/v1/projects', status: projects.response.status, body: page },
    { method: 'get', path: '/dpc/v1/projects/{projectId}/environments', status: environments.response.status, body: environments.data },
    { method: 'get', path: '/dpc/v1/projects/{projectId}', status: missing.response.status, body: problem },
  ];
}
`;

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    noEmit: true,
    allowImportingTsExtensions: true,
    types: [],
    lib: ['ES2022', 'DOM'],
  },
  files: ['client.ts'],
};

test('a client generated from the served document compiles, calls the live server without spelling defaults, and its answers match the document', async (t) => {
  const server = await TestServer.start('sqlite');
  const dir = mkdtempSync(path.join(tmpdir(), 'dpc-client-'));
  t.after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const document = (await server.request('GET', '/dpc/openapi.json')).body;

  writeFileSync(path.join(dir, 'openapi.ts'), astToString(await openapiTS(document)));
  writeFileSync(path.join(dir, 'client.ts'), CLIENT);
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify(TSCONFIG));
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  symlinkSync(path.resolve('node_modules'), path.join(dir, 'node_modules'), 'dir');
  const tsc = path.resolve('node_modules/typescript/bin/tsc');
  await promisify(execFile)(process.execPath, [tsc, '-p', dir]).catch((error: { stdout: string }) => {
    assert.fail(`the generated client does not compile:\n${error.stdout}`);
  });

  const caller = await server.newAccount();
  const { useTheApi } = (await import(pathToFileURL(path.join(dir, 'client.ts')).href)) as {
    useTheApi(baseUrl: string, token: string): Promise<{ method: string; path: string; status: number; body: unknown }[]>;
  };
  const answers = await useTheApi(server.url, caller.token);
  assert.deepEqual(
    answers.map((answer) => answer.status),
    [201, 201, 200, 200, 404],
  );
  assert.equal((answers[2].body as { size: number }).size, 25, 'the default page size applies');
  assert.equal((answers[3].body as { total: number }).total, 1);

  // Every answer matches the schema the document gives for its operation and status.
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
  (addFormats as unknown as (instance: Ajv2020) => void)(ajv);
  ajv.addSchema({ $id: 'openapi.json', components: document.components });
  for (const { method, path: operationPath, status, body } of answers) {
    const content = document.paths[operationPath][method].responses[status].content;
    const { schema } = content['application/json'] ?? content['application/problem+json'];
    const validate = ajv.compile({ $ref: `openapi.json${schema.$ref}` });
    assert.ok(validate(body), `${method} ${operationPath} ${status}: ${ajv.errorsText(validate.errors)}`);
  }
});
