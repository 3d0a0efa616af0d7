/** A valid OAuth connection create body; without tokens the connection is pending setup. */
export function oauthConnectionBody(name: string, authorized = true) {
  return {
    name,
    grantType: 'AUTHORIZATION_CODE',
    clientId: `client-${name}`,
    clientSecret: { secretName: 'oauth-apps', secretKey: name },
    authorizationUrl: 'https://login.example.com/authorize',
    tokenUrl: 'https://login.example.com/token',
    scopes: ['read'],
    ...(authorized && { tokens: { secretName: `tokens-${name}` } }),
  };
}
