import fp from 'fastify-plugin';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
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

/**
 * The caller of the request's bearer token: at once when the token was verified before (the usual
 * request), else once verified. A token that is not valid is the 401 problem.
 */
function authenticate(request: FastifyRequest): Principal | Promise<Principal> {
  try {
    const token = bearerTokenOf(request);
    if (isDirectoryToken(token)) return verifyDirectoryToken(request.server.store.db, token).catch(asProblem);
    return request.server.tokens.known(token) ?? request.server.tokens.verify(token).catch(asProblem);
  } catch (error) {
    asProblem(error);
  }
}

function asProblem(error: unknown): never {
  throw error instanceof InvalidToken ? invalidTokenProblem(error) : error;
}

/** Sets the request's principal; answers the 403 problem when it may not call this operation. */
function authorize(request: FastifyRequest, principal: Principal): ProblemError | undefined {
  const accountHeader = request.headers['account-id'];
  if (accountHeader !== undefined && accountHeader !== principal.accountId) {
    return new ProblemError(403, 'The account-id header does not match the account of the bearer token.');
  }
  // routeOptions is built anew at each read: read once.
  const { config } = request.routeOptions;
  // A request no route takes is answered 404 or 405 (in SCIM's form under the SCIM base): nothing to guard.
  if (principal.directoryToken && !config.directoryIntegration && !request.is404) {
    return new ProblemError(403, 'A directory-integration token reaches only the SCIM operations of its account.');
  }
  const needed = requiredRole(request, config.role);
  if (!roleAllows(principal.role, needed)) {
    return new ProblemError(403, `This operation needs the ${needed} role; the caller has ${principal.role}.`);
  }
  request.principal = principal;
}

/**
 * Counts a failed authentication against its address's rate limit, for every door that authenticates
 * before the limiter runs (the limiter itself runs after authentication, per client): the API and the
 * agent protocol. Hosted Git authenticates after it, so its requests are counted by address anyway. Resolves while the address is within its limit; past it, rejects with the 429. Undefined
 * when rate limiting is off.
 */
export function failedAuthenticationCounter(
  app: FastifyInstance,
): ((request: FastifyRequest, reply: FastifyReply) => Promise<void>) | undefined {
  if (!app.hasDecorator('rateLimit')) return undefined;
  // The limiter as registered (no options of its own): its store, so that every door counts into one budget
  // per address, together with the requests that are counted by address anyway (token requests, hosted Git).
  // Its key is the address here, since a request that failed authentication has no client.
  const limiter = app.rateLimit();
  return async (request, reply) => {
    await limiter.call(app, request, reply);
  };
}

/** Guards every operation of the scope it is registered in: a valid token, the right account, a high enough role. */
export const authPlugin = fp(async (app: FastifyInstance) => {
  app.decorateRequest('principal', null as unknown as Principal);
  // A failed authentication counts against its address's rate limit, so that guessing tokens is limited too.
  const countFailure = failedAuthenticationCounter(app);
  // A callback rather than a promise: the usual request (a token verified before) is authorized
  // within this call (a promise per request is measurable on the hot read path).
  app.addHook('onRequest', (request, reply, done) => {
    const refuse = (error: Error) => {
      if (!countFailure) return done(error);
      countFailure(request, reply).then(() => done(error), done);
    };
    let principal: Principal | Promise<Principal>;
    try {
      principal = authenticate(request);
    } catch (error) {
      return refuse(error as Error);
    }
    if (!(principal instanceof Promise)) return done(authorize(request, principal));
    principal.then((known) => done(authorize(request, known)), refuse);
  });
});
