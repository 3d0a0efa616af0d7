import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

// Docker is not needed to run the tests: these check the deployment files say what docs/operations.md says.
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');

interface Service {
  build?: string;
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }> | string[];
  ports?: string[];
  volumes?: string[];
}

test('compose.yaml runs two instances behind a load balancer on PostgreSQL, as docs/operations.md says', () => {
  const compose = parse(read('compose.yaml'), { merge: true }) as { services: Record<string, Service> };
  const services = compose.services;
  assert.deepEqual(Object.keys(services).sort(), ['api-1', 'api-2', 'lb', 'migrate', 'postgres', 'warehouse']);
  for (const name of ['api-1', 'api-2', 'migrate']) {
    assert.equal(services[name].build, '.', name);
    assert.match(services[name].environment!.DATABASE_URL, /^postgres:\/\/dpc:.*@postgres:5432\/dpc$/);
    assert.ok(services[name].environment!.DPC_ENCRYPTION_KEYS, 'every instance gets the same keys');
    // The hosted agents' warehouse is the same whichever instance runs the work.
    assert.match(services[name].environment!.DPC_HOSTED_WAREHOUSE_URL, /^postgres:\/\/warehouse:.*@warehouse:5432\/warehouse$/);
  }
  assert.deepEqual(services.migrate.command, ['migrate']);
  assert.deepEqual(services['api-1'].depends_on, { migrate: { condition: 'service_completed_successfully' } });
  assert.match(services.postgres.image!, /^postgres:/);
  assert.deepEqual(services.lb.ports, ['8080:8080']);
  const nginx = read('deploy/nginx.conf');
  for (const upstream of ['api-1:8080', 'api-2:8080']) assert.ok(nginx.includes(`server ${upstream}`), upstream);
  assert.ok(services.lb.volumes!.some((volume) => volume.startsWith('./deploy/nginx.conf:')));

  const docs = read('docs/operations.md');
  for (const name of ['compose.yaml', 'api-1', 'api-2', 'lb', 'postgres', 'migrate', 'deploy/nginx.conf', 'docker compose up']) {
    assert.ok(docs.includes(name), `docs/operations.md names ${name}`);
  }
});

test('every server instance in compose.yaml mounts the same repositories volume where DPC_REPOSITORIES_DIR says (issue 36)', () => {
  const compose = parse(read('compose.yaml'), { merge: true }) as {
    services: Record<string, Service>;
    volumes?: Record<string, unknown>;
  };
  // An instance serves: built from this repository and not the one-off migrate command.
  const instances = Object.entries(compose.services).filter(
    ([, service]) => service.build === '.' && !(service.command ?? []).includes('migrate'),
  );
  assert.ok(instances.length >= 2, 'two instances or more');
  const mounted = new Set<string>();
  for (const [name, service] of instances) {
    const directory = service.environment?.DPC_REPOSITORIES_DIR;
    assert.ok(directory && directory.startsWith('/'), `${name} sets DPC_REPOSITORIES_DIR to an absolute path`);
    const volume = (service.volumes ?? []).map((entry) => entry.split(':')).find(([, target]) => target === directory);
    assert.ok(volume, `${name} mounts a volume at ${directory}`);
    const [source] = volume;
    assert.ok(!source.startsWith('.') && !source.startsWith('/'), `${name}: a named volume, not a folder of one host`);
    assert.ok(compose.volumes && source in compose.volumes, `${source} is declared under volumes`);
    mounted.add(`${source}:${directory}`);
  }
  assert.equal(mounted.size, 1, `one volume at one path for every instance: ${[...mounted].join(', ')}`);
  // The image makes the folder for the unprivileged user, so that a new volume takes its owner.
  const directory = [...mounted][0].split(':')[1];
  assert.match(read('Dockerfile'), new RegExp(`mkdir [^\\n]*${directory}[^\\n]*&& chown node:node [^\\n]*${directory}`));
  assert.ok(read('docs/operations.md').includes('DPC_REPOSITORIES_DIR'), 'docs/operations.md says so');
});

test('the Dockerfile builds in one stage and runs as a non-root user without build tools', () => {
  const stages = read('Dockerfile')
    .split(/^FROM /m)
    .slice(1);
  assert.equal(stages.length, 2, 'multi-stage');
  const final = stages[1];
  assert.match(final, /^USER node$/m);
  assert.match(final, /COPY --from=build \/app\/node_modules/);
  assert.doesNotMatch(final, /g\+\+|\bmake\b|python/, 'no build tools in the final image');
  assert.match(final, /apt-get install [^\n]*\bgit\b/, 'git, which serves and migrates project repositories');
  assert.match(final, /\/readyz/, 'the health check asks for readiness');
});
