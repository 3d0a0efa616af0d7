import type { FastifyInstance, FastifyRequest } from 'fastify';
import { roleAllows } from '../../core/auth/accounts.ts';
import { InvalidToken, type Principal } from '../../core/auth/tokens.ts';
import { ProblemError, notFound } from '../../core/problems.ts';
import { PROJECT_ID_PATTERN, requireProject } from '../projects/index.ts';
import { assertNoMigrationInProgress, ensureHostedRepository, repositoriesRoot, sweepStaleQuarantines } from './hosting.ts';
import { externalRepositoryOf } from './repository.ts';
import { receiveChecks, serveGitHttpBackend } from './http-backend.ts';

const REPOSITORY = new RegExp(`^(${PROJECT_ID_PATTERN.slice(1, -1)})\\.git$`);
/** What git's smart HTTP asks for: the ref advertisement and the two services. */
const GIT_PATH = /^(info\/refs|git-upload-pack|git-receive-pack)$/;

/** Room for a push request's ref updates beside its pack. */
const PUSH_OVERHEAD_BYTES = 1024 * 1024;

function challenge(detail: string): ProblemError {
  return new ProblemError(401, detail, { headers: { 'www-authenticate': 'Basic realm="dpc git", charset="UTF-8"' } });
}

/** The API client of `Authorization: Basic <any user>:<access token>`, as git sends it. */
async function authenticateGitClient(request: FastifyRequest): Promise<Principal> {
  const match = /^Basic +([A-Za-z0-9+/=]+)$/i.exec(request.headers.authorization ?? '');
  if (!match) throw challenge('Git over HTTP needs Basic authentication with an access token as the password.');
  const decoded = Buffer.from(match[1], 'base64').toString('utf8');
  const token = decoded.slice(decoded.indexOf(':') + 1);
  try {
    // Agent and directory-integration tokens are not account API tokens: verify refuses them.
    return await request.server.tokens.verify(token);
  } catch (error) {
    if (error instanceof InvalidToken) throw challenge(`The access token is not valid: ${error.message}.`);
    throw error;
  }
}

/**
 * The hosted repositories over Git's smart HTTP protocol at /dpc/git/{projectId}.git: viewers fetch,
 * developers push, nobody pushes while the project's repository is being migrated.
 */
export async function gitHostingRoutes(app: FastifyInstance): Promise<void> {
  // git http-backend reads the body itself, straight off the socket.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, _body, done) => done(null));

  app.route<{ Params: { repository: string; '*': string } }>({
    method: ['GET', 'POST'],
    url: '/:repository/*',
    schema: { hide: true },
    handler: async (request, reply) => {
      const { repository, '*': service } = request.params;
      const projectId = REPOSITORY.exec(repository)?.[1];
      if (!projectId || !GIT_PATH.test(service)) throw notFound('No Git repository is served at this path.');
      const principal = await authenticateGitClient(request);
      await requireProject(app.store.db, principal.accountId, projectId);
      const pushing = service === 'git-receive-pack' || (request.query as { service?: string }).service === 'git-receive-pack';
      if (pushing) {
        if (!roleAllows(principal.role, 'developer')) {
          throw new ProblemError(403, `Pushing needs the developer role; the caller has ${principal.role}.`);
        }
        await assertNoMigrationInProgress(app.store.db, projectId);
        // A body past the limit cannot hold a pack within it (the limit is on the pack; the rest of a push
        // request is its ref updates): refused before it is read.
        const length = Number(request.headers['content-length'] ?? 0);
        if (length > app.config.gitMaxPushBytes + PUSH_OVERHEAD_BYTES) {
          throw new ProblemError(
            413,
            `The push is larger than this server takes (${app.config.gitMaxPushBytes} bytes of pack, DPC_GIT_MAX_PUSH_BYTES).`,
          );
        }
      }
      const external = await externalRepositoryOf(app.store.db, projectId);
      if (external) {
        throw new ProblemError(
          409,
          `The project's repository is ${external.cloneUrl} (${external.provider}); the server no longer hosts it.`,
          { name: 'repository-not-hosted' },
        );
      }
      const hosted = await ensureHostedRepository(app.config, projectId);
      if (pushing) await sweepStaleQuarantines(hosted);
      reply.hijack();
      await serveGitHttpBackend(request.raw, reply.raw, {
        projectRoot: repositoriesRoot(app.config),
        pathInfo: `/${projectId}.git/${service}`,
        remoteUser: principal.clientId,
        gitConfig: receiveChecks(app.config.gitMaxPushBytes),
      });
    },
  });
}
