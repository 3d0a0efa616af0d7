// Lints the OpenAPI document the server serves: Redocly's recommended rules (redocly.yaml) and Spectral's
// spectral:oas (.spectral.yaml), failing on any error or warning. The document is built without listening.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const dir = mkdtempSync(path.join(tmpdir(), 'dpc-openapi-'));
const document = path.join(dir, 'openapi.json');
// No usage reports or update checks from the linters.
const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' };
const bin = (name) => path.join('node_modules', '.bin', name);
const steps = [
  [process.execPath, ['--import', 'tsx', 'scripts/openapi-document.ts', document]],
  [bin('redocly'), ['lint', '--config', 'redocly.yaml', document]],
  [
    bin('spectral'),
    ['lint', '--ruleset', '.spectral.yaml', '--resolver', 'scripts/spectral-resolver.cjs', '--fail-severity', 'warn', document],
  ],
];
let status = 0;
for (const [command, args] of steps) {
  status = spawnSync(command, args, { stdio: 'inherit', env }).status ?? 1;
  if (status !== 0) break;
}
rmSync(dir, { recursive: true, force: true });
process.exit(status);
