import { Type } from 'typebox';

/**
 * The token request's form (RFC 6749 section 4.4.2). The client may send its credentials with HTTP Basic
 * instead of client_id and client_secret (section 2.3.1); the server takes either.
 */
export const TokenRequest = Type.Object(
  {
    grant_type: Type.Enum(['client_credentials'], { description: 'the only grant: client_credentials' }),
    client_id: Type.String({ description: 'API client id (or send it with HTTP Basic)' }),
    client_secret: Type.String({ description: 'API client secret (or send it with HTTP Basic)' }),
    audience: Type.Optional(Type.String({ description: "the server's audience; any other is invalid_target" })),
  },
  { examples: [{ grant_type: 'client_credentials', client_id: '<CLIENT_ID>', client_secret: '<CLIENT_SECRET>' }] },
);

export const TokenResponse = Type.Object(
  {
    access_token: Type.String(),
    token_type: Type.Literal('Bearer'),
    expires_in: Type.Integer({ description: 'seconds the token is valid' }),
  },
  { examples: [{ access_token: 'eyJhbGciOiJFUzI1NiIsImtpZCI6Ii4uLiJ9...', token_type: 'Bearer', expires_in: 1800 }] },
);

/** RFC 6749 section 5.2 error answer: the token endpoint speaks OAuth, not problem+json. */
export const OAuthError = Type.Object(
  {
    error: Type.String({
      examples: ['invalid_request', 'invalid_client', 'unsupported_grant_type', 'invalid_target'],
    }),
    error_description: Type.String(),
  },
  { examples: [{ error: 'invalid_client', error_description: 'The client is unknown or the secret is wrong.' }] },
);

/** The public signing keys (RFC 7517 JSON Web Key Set): EC P-256 keys, newest first. */
export const JsonWebKeySet = Type.Object({
  keys: Type.Array(
    Type.Object({
      kty: Type.String({ examples: ['EC'] }),
      crv: Type.String({ examples: ['P-256'] }),
      x: Type.String(),
      y: Type.String(),
      kid: Type.String({ description: 'the `kid` of the tokens this key verifies' }),
      alg: Type.String({ examples: ['ES256'] }),
      use: Type.Literal('sig'),
    }),
  ),
});
