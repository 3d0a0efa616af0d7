import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ProblemError } from '../problems.ts';
import { roleAllows, type Role } from './accounts.ts';
import { isDirectoryToken, verifyDirectoryToken } from './directory-tokens.ts';
import { InvalidToken, type Principal } from './tokens.ts';

function requiredRole(request: FastifyRequest, configured: Role | undefined): Role {
  if (configured) return configured;
  return request.method === 'GET' || request.method === 'HEAD' ? 'viewer' : 'developer';
}

/** The bearer token of the request, or the 401 problem that asks for one. */
export function bearerTokenOf(request: FastifyRequest): string {
  const header = request.headers.authorization;
  const match = header ? /^Bearer[ ]+([A-Za-z0-9\-_.~+/]+=*)$/i.exec(header) : null;
  if (!match) {
    throw new ProblemError(401, 'A bearer token is required: send "Authorization: Bearer <ACCESS_TOKEN>".', {
      headers: { 'www-authenticate': header ? 'Bearer error="invalid_token"' : 'Bearer' },
    });
  }
  return match[1];
}

/** The 401 problem of a token that is not valid for the operation. */
export function invalidTokenProblem(error: InvalidToken): ProblemError {
  return new ProblemError(401, `The bearer token is not valid: ${error.message}.`, {
    headers: { 'www-authenticate': 'Bearer error="invalid_token"' },
  });
}

async function authenticate(request: FastifyRequest): Promise<Principal> {
  const token = bearerTokenOf(request);
  try {
    if (isDirectoryToken(token)) return await verifyDirectoryToken(request.server.store.db, token);
    return await request.server.tokens.verify(token);
  } catch (error) {
    if (!(error instanceof InvalidToken)) throw error;
    throw invalidTokenProblem(error);
  }
}

/** Guards every operation of the scope it is registered in: a valid token, the right account, a high enough role. */
export const authPlugin = fp(async (app: FastifyInstance) => {
  app.decorateRequest('principal', null as unknown as Principal);
  // A failed authentication counts against its address's rate limit (the limiter itself runs only after
  // authentication, per client), so that guessing tokens is limited too.
  const countFailure = app.hasDecorator('rateLimit') ? app.rateLimit({ keyGenerator: (request) => request.ip }) : undefined;
  app.addHook('onRequest', async (request, reply) => {
    const principal = await authenticate(request).catch(async (error: unknown) => {
      await countFailure?.call(app, request, reply);
      throw error;
    });
    const accountHeader = request.headers['account-id'];
    if (accountHeader !== undefined && accountHeader !== principal.accountId) {
      throw new ProblemError(403, 'The account-id header does not match the account of the bearer token.');
    }
    // routeOptions is built anew at each read: read once.
    const { config } = request.routeOptions;
    if (principal.directoryToken && !config.directoryIntegration) {
      throw new ProblemError(403, 'A directory-integration token reaches only the SCIM operations of its account.');
    }
    const needed = requiredRole(request, config.role);
    if (!roleAllows(principal.role, needed)) {
      throw new ProblemError(403, `This operation needs the ${needed} role; the caller has ${principal.role}.`);
    }
    request.principal = principal;
  });
});
