import type { Executor } from '../../core/db/database.ts';
import type { OutboundClient, OutboundRequest } from '../../core/outbound.ts';
import { badRequest, ProblemError, unprocessable } from '../../core/problems.ts';
import { requireOAuthConnection } from '../oauth-connections/index.ts';
import type { AuthenticationOption, Endpoint, TestEndpointRequest, TestEndpointResponse } from './schemas.ts';
import { URI_PLACEHOLDER } from './profiles.ts';

type RequestParameters = Endpoint['headerParameters'];

/** Default values of the endpoint's parameters, with the test request's values over them. */
function valuesOf(defaults: RequestParameters, given: Record<string, string> | undefined): Map<string, string> {
  const values = new Map<string, string>();
  for (const parameter of defaults) if (parameter.value !== undefined) values.set(parameter.name, parameter.value);
  for (const [name, value] of Object.entries(given ?? {})) values.set(name, value);
  return values;
}

/** The value of a credential the test request must carry, or a 400 naming it. */
function credential(request: TestEndpointRequest, name: string): string {
  // Own members only: a profile names its credentials, and `toString` is a member every object inherits.
  const value = request.credentials && Object.hasOwn(request.credentials, name) ? request.credentials[name] : undefined;
  if (value === undefined)
    throw badRequest(`The test needs the credential "${name}".`, [`body.credentials.${name}: is required`]);
  return value;
}

/** The OAuth connection the option selects (by the variable it names when it has several); it must be authorized. */
async function oauthAccessToken(
  db: Executor,
  accountId: string,
  option: AuthenticationOption,
  request: TestEndpointRequest,
): Promise<string> {
  let chosen = option.parameters[0];
  if (option.parameters.length > 1) {
    const variable = option.additionalParameters?.variable ?? '';
    const selected = request.variables?.[variable];
    const match = option.parameters.find((parameter) => parameter.name === selected);
    if (!match) {
      throw badRequest(
        `The variable "${variable}" selects the OAuth connection: one of ${option.parameters.map((p) => p.name).join(', ')}.`,
        [`body.variables.${variable}: must be one of ${option.parameters.map((p) => p.name).join(', ')}`],
      );
    }
    chosen = match;
  }
  const connection = await requireOAuthConnection(db, accountId, chosen.oauthConnectionId!).catch((error: unknown) => {
    const gone = error instanceof ProblemError && error.status === 404;
    throw gone ? unprocessable(`The OAuth connection ${chosen.oauthConnectionId} of the endpoint no longer exists.`) : error;
  });
  if (connection.status !== 'AUTHORIZED') {
    throw new ProblemError(
      409,
      `The OAuth connection "${connection.name}" is pending setup: complete its setup (POST /v1/oauth-connections/${connection.id}/setup) before testing with it.`,
      { name: 'oauth-pending-setup' },
    );
  }
  return credential(request, 'accessToken');
}

/** The endpoint's URL with its URI parameters put in, or a 400 naming the parameters that make it invalid. */
function urlWith(template: string, uriValues: Map<string, string>): URL {
  const used = [...new Set([...template.matchAll(URI_PLACEHOLDER)].map(([, name]) => name))];
  const encoded = new Map<string, string>();
  for (const name of used) {
    try {
      encoded.set(name, encodeURIComponent(uriValues.get(name)!));
    } catch {
      // A lone surrogate has no UTF-8 form to percent-encode.
      throw badRequest('A URI parameter is not valid text.', [`body.uriParameters.${name}: is not valid Unicode text`]);
    }
  }
  const text = template.replace(URI_PLACEHOLDER, (_, name: string) => encoded.get(name)!);
  if (!URL.canParse(text)) {
    throw badRequest(
      'The endpoint URL is not a valid URL once its URI parameters are put in.',
      used.map((name) => `body.uriParameters.${name}: makes the endpoint URL invalid`),
    );
  }
  return new URL(text);
}

/** The request the endpoint describes, authenticated as the test request asks. */
async function outboundRequestOf(
  db: Executor,
  accountId: string,
  endpoint: Endpoint,
  request: TestEndpointRequest,
): Promise<OutboundRequest> {
  const uriValues = valuesOf(endpoint.uriParameters, request.uriParameters);
  const missing = [...endpoint.url.matchAll(URI_PLACEHOLDER)].map(([, name]) => name).filter((name) => !uriValues.has(name));
  if (missing.length > 0) {
    throw badRequest(
      'The test needs a value for every URI parameter.',
      missing.map((name) => `body.uriParameters.${name}: is required`),
    );
  }
  const url = urlWith(endpoint.url, uriValues);
  for (const [name, value] of valuesOf(endpoint.queryParameters, request.queryParameters)) url.searchParams.set(name, value);
  const headers = Object.fromEntries(valuesOf(endpoint.headerParameters, request.headerParameters));
  if (endpoint.body !== null) headers['content-type'] ??= 'application/json';
  const credentialHeaders: string[] = [];
  const outbound: OutboundRequest = {
    method: endpoint.httpMethod,
    url,
    headers,
    body: endpoint.body ?? undefined,
    credentialHeaders,
  };

  const authType = request.authType ?? endpoint.auth;
  if (authType === 'NONE') return outbound;
  const option = endpoint.authenticationOptions.find((o) => o.type === authType);
  if (!option)
    throw badRequest(`The endpoint has no ${authType} authentication option.`, [
      `body.authType: the endpoint has no ${authType} option`,
    ]);
  if (option.parameters.length === 0 && (option.type === 'API_KEY' || option.type === 'OAUTH')) {
    throw unprocessable(
      `The ${option.type} option of the endpoint binds no ${option.type === 'OAUTH' ? 'OAuth connection' : 'key'} yet: add one to test it.`,
    );
  }
  switch (option.type) {
    case 'BASIC': {
      // The profile's URL is https (checked when it was saved), and a redirect elsewhere drops the header.
      const username = option.parameters.find((p) => p.name === 'username')?.value ?? credential(request, 'username');
      headers.authorization = `Basic ${Buffer.from(`${username}:${credential(request, 'password')}`).toString('base64')}`;
      break;
    }
    case 'BEARER':
      headers.authorization = `Bearer ${credential(request, 'token')}`;
      break;
    case 'API_KEY':
      for (const key of option.parameters) {
        if (key.addTo === 'QUERY_PARAMETER') {
          url.searchParams.set(key.name, credential(request, key.name));
        } else {
          headers[key.name] = credential(request, key.name);
          credentialHeaders.push(key.name);
        }
      }
      break;
    case 'OAUTH':
      headers.authorization = `Bearer ${await oauthAccessToken(db, accountId, option, request)}`;
      break;
  }
  return outbound;
}

/**
 * Sends the endpoint's request once and answers what the external API answered. The credentials of
 * the test request go into that one request only: they are not stored, logged or answered.
 */
export async function testEndpoint(
  db: Executor,
  outbound: OutboundClient,
  accountId: string,
  endpoint: Endpoint,
  request: TestEndpointRequest,
): Promise<TestEndpointResponse> {
  const response = await outbound.send(await outboundRequestOf(db, accountId, endpoint, request));
  return {
    status: response.status,
    headers: response.headers,
    body: response.body.toString('utf8'),
    truncated: response.truncated,
  };
}
