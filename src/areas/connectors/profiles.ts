import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { credentialIn, credentialInNamed } from '../../core/credentials.ts';
import { badRequest } from '../../core/problems.ts';
import { existingOAuthConnectionIds } from '../oauth-connections/index.ts';
import type {
  AuthenticationOption,
  AuthParameter,
  CustomConnector,
  CustomConnectorInput,
  Endpoint,
  EndpointInput,
  FlexConnector,
} from './schemas.ts';

/** Media type of a profile part in an artifact upload. */
export const CONNECTOR_PROFILE_CONTENT_TYPE = 'application/vnd.matillion.connector-profile+json';

/**
 * Name of the artifact part a publishing tool uploads a listed profile as; the part's content is the
 * profile exactly as the list answers it.
 */
export function connectorProfilePartName(profile: FlexConnector | CustomConnector): string {
  return 'alternateId' in profile
    ? `connector-profile:flex-${profile.alternateId}.json`
    : `connector-profile:custom-${profile.id}.json`;
}

/** `{org}` in an endpoint URL stands for the URI parameter `org`. */
export const URI_PLACEHOLDER = /\{([^{}]+)\}/g;

/** A header name as HTTP allows it (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

type OptionType = AuthenticationOption['type'];

/** Which parameter fields each type of option takes besides `name`. */
const PARAMETER_FIELDS: Record<OptionType, Array<keyof AuthParameter>> = {
  BASIC: ['value', 'secret'],
  BEARER: ['secret'],
  API_KEY: ['secret', 'addTo'],
  OAUTH: ['oauthConnectionId'],
};
/** The parameters BASIC and BEARER options consist of, each exactly once. */
const FIXED_PARAMETERS: Partial<Record<OptionType, string[]>> = { BASIC: ['username', 'password'], BEARER: ['token'] };

/** The endpoint as stored: an id made when absent, and empty values for what was left out. */
export function toEndpoint(input: EndpointInput): Endpoint {
  return {
    id: input.id ?? randomUUID(),
    name: input.name,
    url: input.url,
    httpMethod: input.httpMethod,
    auth: input.auth,
    authTemplate: input.authTemplate ?? null,
    authenticationOptions: input.authenticationOptions ?? [],
    paging: input.paging ?? { type: 'NONE' },
    headerParameters: input.headerParameters ?? [],
    queryParameters: input.queryParameters ?? [],
    uriParameters: input.uriParameters ?? [],
    structure: input.structure ?? { schema: {}, containedInOuterArray: false, repeatingElementPath: [] },
    body: input.body ?? null,
  };
}

function optionViolations(option: AuthenticationOption, at: string, url: URL | undefined, endpointAt: string): string[] {
  const violations: string[] = [];
  const names = new Set<string>();
  option.parameters.forEach((parameter, k) => {
    const parameterAt = `${at}.parameters.${k}`;
    for (const field of ['value', 'secret', 'addTo', 'oauthConnectionId'] as const) {
      if (parameter[field] !== undefined && !PARAMETER_FIELDS[option.type].includes(field)) {
        violations.push(`${parameterAt}.${field}: is not allowed in a ${option.type} option`);
      }
    }
    if (names.has(parameter.name))
      violations.push(`${parameterAt}.name: "${parameter.name}" is used by another parameter of the option`);
    names.add(parameter.name);
    if (option.type === 'BASIC' && parameter.name !== 'username' && parameter.value !== undefined) {
      violations.push(
        `${parameterAt}.value: a profile holds no credential: give where the ${parameter.name} is kept in "secret"`,
      );
    }
    if (option.type === 'API_KEY') {
      if (parameter.addTo === undefined) violations.push(`${parameterAt}.addTo: is required`);
      if (parameter.addTo === 'HEADER_PARAMETER' && !HEADER_NAME.test(parameter.name)) {
        violations.push(`${parameterAt}.name: is not a valid header name`);
      }
    }
    if (option.type === 'OAUTH' && parameter.oauthConnectionId === undefined) {
      violations.push(`${parameterAt}.oauthConnectionId: is required`);
    }
  });
  // No parameters at all is valid: the credential is bound when the connector is used or tested.
  const fixed = FIXED_PARAMETERS[option.type];
  const given = option.parameters.map((p) => p.name);
  if (fixed && given.length > 0 && (given.length !== fixed.length || !fixed.every((name) => given.includes(name)))) {
    violations.push(`${at}.parameters: a ${option.type} option has exactly the parameters ${fixed.join(' and ')}, or none`);
  }
  if (option.type === 'BASIC' && url && url.protocol !== 'https:') {
    violations.push(`${endpointAt}.url: must be https: Basic credentials are sent only over HTTPS`);
  }
  if (option.type === 'OAUTH' && option.parameters.length > 1 && !option.additionalParameters?.variable) {
    violations.push(`${at}.additionalParameters.variable: is required to select one of several OAuth connections`);
  }
  return violations;
}

const NO_CREDENTIAL = 'a profile holds no credential: bind it through an authentication option (a secret reference)';

/**
 * Credentials written where a profile keeps plain values: the URL (userinfo, `?api_key=`), default values of
 * header, query and URI parameters (`X-Auth-Token`, `key`, `sig`, a custom header valued `Bearer ...`),
 * additional parameters, plain option values and the body, as src/core/credentials.ts finds them.
 */
function credentialViolations(endpoint: EndpointInput, at: string): string[] {
  const violations: string[] = [];
  const refuse = (field: string, reason: string | undefined) => {
    if (reason) violations.push(`${field}: ${NO_CREDENTIAL} (${reason})`);
  };
  refuse(`${at}.url`, credentialIn(endpoint.url));
  for (const list of ['headerParameters', 'queryParameters', 'uriParameters'] as const) {
    (endpoint[list] ?? []).forEach((parameter, k) => {
      if (parameter.value === undefined) return;
      // A URI parameter's name is a placeholder's (`/issues/{key}`), not a credential's: only its value tells.
      const reason =
        list === 'uriParameters' ? credentialIn(parameter.value) : credentialInNamed(parameter.name, parameter.value);
      refuse(`${at}.${list}.${k}.value`, reason);
    });
  }
  (endpoint.authenticationOptions ?? []).forEach((option, j) => {
    for (const [key, value] of Object.entries(option.additionalParameters ?? {})) {
      refuse(`${at}.authenticationOptions.${j}.additionalParameters.${key}`, credentialInNamed(key, value));
    }
    option.parameters.forEach((parameter, k) => {
      if (parameter.value !== undefined) {
        refuse(`${at}.authenticationOptions.${j}.parameters.${k}.value`, credentialIn(parameter.value));
      }
    });
  });
  if (endpoint.body) refuse(`${at}.body`, credentialIn(endpoint.body));
  if (endpoint.authTemplate) refuse(`${at}.authTemplate`, credentialIn(endpoint.authTemplate));
  return violations;
}

function endpointViolations(endpoint: EndpointInput, at: string): string[] {
  const violations: string[] = [];
  const sample = endpoint.url.replace(URI_PLACEHOLDER, 'x');
  const url = URL.canParse(sample) ? new URL(sample) : undefined;
  if (!url || !['http:', 'https:'].includes(url.protocol)) violations.push(`${at}.url: must be an http or https URL`);
  violations.push(...credentialViolations(endpoint, at));
  const uriNames = new Set((endpoint.uriParameters ?? []).map((p) => p.name));
  for (const [, name] of endpoint.url.matchAll(URI_PLACEHOLDER)) {
    if (!uriNames.has(name)) violations.push(`${at}.url: {${name}} has no URI parameter of that name`);
  }
  (endpoint.headerParameters ?? []).forEach((parameter, k) => {
    if (!HEADER_NAME.test(parameter.name)) violations.push(`${at}.headerParameters.${k}.name: is not a valid header name`);
  });
  const options = endpoint.authenticationOptions ?? [];
  const types = new Set<string>();
  options.forEach((option, j) => {
    const optionAt = `${at}.authenticationOptions.${j}`;
    if (types.has(option.type)) violations.push(`${optionAt}.type: the endpoint has another ${option.type} option`);
    types.add(option.type);
    violations.push(...optionViolations(option, optionAt, url, at));
  });
  if (endpoint.auth !== 'NONE' && !types.has(endpoint.auth)) {
    violations.push(`${at}.auth: the endpoint has no ${endpoint.auth} authentication option`);
  }
  return violations;
}

/**
 * Checks what the schema cannot: the parameters each authentication type needs, unique endpoint ids
 * and key names, Basic only over HTTPS, and OAuth connections of the account. 400 with every violation.
 * An OAuth connection pending setup may be attached: it only cannot be used for tests yet.
 */
export async function assertValidProfile(db: Executor, accountId: string, profile: CustomConnectorInput): Promise<void> {
  const violations: string[] = [];
  const ids = new Set<string>();
  const oauthReferences: Array<{ at: string; id: string }> = [];
  for (const [field, url] of [
    ['body.icon', profile.icon],
    ['body.logo.image.url', profile.logo?.image.url],
  ] as const) {
    const reason = url === undefined ? undefined : credentialIn(url);
    if (reason) violations.push(`${field}: ${NO_CREDENTIAL} (${reason})`);
  }
  profile.endpoints.forEach((endpoint, i) => {
    const at = `body.endpoints.${i}`;
    if (endpoint.id !== undefined) {
      if (ids.has(endpoint.id)) violations.push(`${at}.id: "${endpoint.id}" is the id of another endpoint of the profile`);
      ids.add(endpoint.id);
    }
    violations.push(...endpointViolations(endpoint, at));
    (endpoint.authenticationOptions ?? []).forEach((option, j) =>
      option.parameters.forEach((parameter, k) => {
        if (parameter.oauthConnectionId) {
          oauthReferences.push({
            at: `${at}.authenticationOptions.${j}.parameters.${k}.oauthConnectionId`,
            id: parameter.oauthConnectionId,
          });
        }
      }),
    );
  });
  const existing = await existingOAuthConnectionIds(db, accountId, [...new Set(oauthReferences.map((r) => r.id))]);
  for (const reference of oauthReferences) {
    if (!existing.has(reference.id)) violations.push(`${reference.at}: OAuth connection ${reference.id} does not exist`);
  }
  if (violations.length > 0) throw badRequest('The connector profile is not valid.', violations);
}
