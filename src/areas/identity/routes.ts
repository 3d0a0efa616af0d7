import type { FastifyInstance, FastifyReply } from 'fastify';
import { JsonWebKeySet, OAuthError, TokenRequest, TokenResponse } from './schemas.ts';

/** RFC 6749 error answer of the token endpoint (the token endpoint speaks OAuth, not problem+json). */
function oauthError(reply: FastifyReply, status: number, error: string, description: string) {
  if (status === 401) reply.header('www-authenticate', 'Basic realm="platform-api"');
  return reply.code(status).header('cache-control', 'no-store').send({ error, error_description: description });
}

/**
 * Client credentials from the form, or from HTTP Basic as RFC 6749 section 2.3.1 also allows (each part
 * form-URL-encoded); undefined when the Basic credentials are malformed.
 */
function clientCredentials(form: Record<string, string>, authorization: string | undefined) {
  const basic = authorization && /^Basic\s+(\S+)$/i.exec(authorization);
  if (basic) {
    const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon > 0) {
      try {
        return {
          clientId: decodeURIComponent(decoded.slice(0, colon).replaceAll('+', ' ')),
          clientSecret: decodeURIComponent(decoded.slice(colon + 1).replaceAll('+', ' ')),
        };
      } catch {
        return undefined;
      }
    }
  }
  return { clientId: form.client_id, clientSecret: form.client_secret };
}

/**
 * What of a validation failure of the form the grant judges itself, in RFC 6749's terms: a missing or other
 * grant_type (invalid_request, unsupported_grant_type) and missing client credentials (HTTP Basic, else
 * invalid_client). Any other failure is a malformed request.
 */
const JUDGED_BY_THE_GRANT = new Set(['required', 'enum']);

/** The OAuth 2.0 token endpoint (client-credentials grant) and the keys that verify its tokens. */
export async function identityRoutes(app: FastifyInstance): Promise<void> {
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
    done(null, Object.fromEntries(new URLSearchParams(body as string)));
  });

  app.post(
    '/oauth/dpc/token',
    {
      // The grant answers its own RFC 6749 errors, so a malformed form is the handler's to judge.
      attachValidation: true,
      schema: {
        summary: 'Obtain an access token (OAuth 2.0 client-credentials grant)',
        tags: ['Identity'],
        security: [],
        consumes: ['application/x-www-form-urlencoded'],
        body: TokenRequest,
        response: { 200: TokenResponse, 400: OAuthError, 401: OAuthError },
      },
    },
    async (request, reply) => {
      // A field that is not a string (a JSON body's object, number or array) or that holds a NUL.
      const malformed = request.validationError?.validation.filter(
        (issue: { keyword: string }) => !JUDGED_BY_THE_GRANT.has(issue.keyword),
      );
      if (malformed?.length) {
        return oauthError(reply, 400, 'invalid_request', `The request is malformed: ${request.validationError!.message}.`);
      }
      const form = (request.body ?? {}) as Record<string, string>;
      if (form.grant_type !== 'client_credentials') {
        return form.grant_type
          ? oauthError(reply, 400, 'unsupported_grant_type', 'Only the client_credentials grant is supported.')
          : oauthError(reply, 400, 'invalid_request', 'grant_type is required.');
      }
      if (form.audience !== undefined && form.audience !== app.config.audience) {
        return oauthError(reply, 400, 'invalid_target', `The audience must be ${app.config.audience}.`);
      }
      const credentials = clientCredentials(form, request.headers.authorization);
      if (!credentials || credentials.clientId?.includes('\0') || credentials.clientSecret?.includes('\0')) {
        return oauthError(reply, 400, 'invalid_request', 'The HTTP Basic client credentials are malformed.');
      }
      const { clientId, clientSecret } = credentials;
      if (!clientId || !clientSecret) {
        return oauthError(reply, 401, 'invalid_client', 'client_id and client_secret are required.');
      }
      const token = await app.tokens.issue(clientId, clientSecret);
      if (!token) return oauthError(reply, 401, 'invalid_client', 'The client is unknown or the secret is wrong.');
      return reply.header('cache-control', 'no-store').send(token);
    },
  );

  app.get(
    '/.well-known/jwks.json',
    {
      schema: {
        summary: 'Public keys that verify access tokens',
        tags: ['Identity'],
        security: [],
        response: { 200: JsonWebKeySet },
      },
    },
    async () => app.tokens.keys.publicJwks(),
  );
}
