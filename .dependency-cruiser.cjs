/**
 * The house's boundaries, checked by `npm run lint:boundaries` (part of `npm run lint`, so of CI).
 * docs/architecture.md explains each; a new rule goes here with its reason.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'Modules that import each other in a loop: break it with a hook, an event or a module both may import.',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'core-not-to-areas',
      severity: 'error',
      comment: 'core is the plumbing every area builds on; it knows no area (areas add their tables to Database themselves).',
      from: { path: '^src/core/' },
      to: { path: '^src/(areas|agent|cli)/|^src/(app|server)\\.ts$' },
    },
    {
      name: 'area-through-its-face',
      severity: 'error',
      comment: "An area reaches another only through that area's index.ts (its public face).",
      from: { path: '^src/areas/([^/]+)/' },
      to: { path: '^src/areas/[^/]+/', pathNot: ['^src/areas/$1/', '^src/areas/[^/]+/index\\.ts$'] },
    },
    {
      name: 'entry-points-through-app',
      severity: 'error',
      comment: 'server.ts and the CLI reach the areas through app.ts (each area registers what it needs at start-up).',
      from: { path: '^src/server\\.ts$|^src/cli/|^src/cli\\.ts$' },
      to: { path: '^src/areas/' },
    },
    {
      name: 'server-not-to-agent',
      severity: 'error',
      comment: 'The server never imports agent code: what both need is in src/contract.',
      from: { path: '^src/(core|areas)/|^src/(app|server)\\.ts$' },
      to: { path: '^src/agent/' },
    },
    {
      name: 'agent-not-to-server',
      severity: 'error',
      comment: 'An agent talks to the server over HTTP only; what both need is in src/contract.',
      from: { path: '^src/agent/' },
      to: { path: '^src/(core|areas)/|^src/(app|server)\\.ts$' },
    },
    {
      name: 'contract-imports-neither',
      severity: 'error',
      comment: 'The contract is pure and shared: it imports no server, agent or CLI code.',
      from: { path: '^src/contract/' },
      to: { path: '^src/(core|areas|agent|cli)/|^src/(app|server|cli)\\.ts$' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
