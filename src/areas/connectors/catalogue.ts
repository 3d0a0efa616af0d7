import type { Endpoint, FlexConnector } from './schemas.ts';

/**
 * The flex connectors this server ships: profiles of well-known public APIs, the same for every
 * account. A credential parameter names what is needed and holds no secret reference: which vault
 * secret holds it is the user's to say when a connector is made from the profile.
 */
const CATALOGUE_DATE = '2026-11-01T00:00:00.000Z';

const NO_STRUCTURE = { schema: {}, containedInOuterArray: false, repeatingElementPath: [] };

function endpoint(
  fields: Pick<Endpoint, 'id' | 'name' | 'url' | 'auth' | 'authenticationOptions'> & Partial<Endpoint>,
): Endpoint {
  return {
    httpMethod: 'GET',
    authTemplate: null,
    paging: { type: 'NONE' },
    headerParameters: [],
    queryParameters: [],
    uriParameters: [],
    structure: NO_STRUCTURE,
    body: null,
    ...fields,
  };
}

function flex(alternateId: string, name: string, site: string, endpoints: Endpoint[]): FlexConnector {
  const icon = `https://${site}/favicon.ico`;
  return {
    alternateId,
    name,
    icon,
    logo: { type: 'URL', image: { url: icon } },
    endpoints,
    deleted: false,
    deletedTime: null,
    lastModified: CATALOGUE_DATE,
  };
}

const bearer = [{ type: 'BEARER' as const, parameters: [{ name: 'token' }], additionalParameters: null }];
const apiKey = (name: string, addTo: 'QUERY_PARAMETER' | 'HEADER_PARAMETER') => [
  { type: 'API_KEY' as const, parameters: [{ name, addTo }], additionalParameters: null },
];

export const FLEX_CONNECTORS: FlexConnector[] = [
  flex('github', 'GitHub', 'github.com', [
    endpoint({
      id: 'list-organization-repositories',
      name: 'List organization repositories',
      url: 'https://api.github.com/orgs/{org}/repos',
      auth: 'BEARER',
      authenticationOptions: bearer,
      paging: { type: 'LINK_HEADER' },
      headerParameters: [{ name: 'Accept', value: 'application/vnd.github+json' }],
      queryParameters: [{ name: 'per_page', value: '100' }],
      uriParameters: [{ name: 'org' }],
      structure: {
        schema: {
          type: 'object',
          properties: { id: { type: 'integer' }, name: { type: 'string' }, private: { type: 'boolean' } },
        },
        containedInOuterArray: true,
        repeatingElementPath: [],
      },
    }),
  ]),
  flex('jira-cloud', 'Jira Cloud', 'www.atlassian.com', [
    endpoint({
      id: 'search-issues',
      name: 'Search issues (JQL)',
      url: 'https://{site}.atlassian.net/rest/api/3/search',
      auth: 'BASIC',
      authenticationOptions: [
        { type: 'BASIC', parameters: [{ name: 'username' }, { name: 'password' }], additionalParameters: null },
      ],
      paging: { type: 'OFFSET' },
      queryParameters: [
        { name: 'jql', value: 'order by created DESC' },
        { name: 'maxResults', value: '100' },
      ],
      uriParameters: [{ name: 'site' }],
      structure: {
        schema: { type: 'object', properties: { id: { type: 'string' }, key: { type: 'string' }, fields: { type: 'object' } } },
        containedInOuterArray: false,
        repeatingElementPath: ['issues'],
      },
    }),
  ]),
  flex('stripe', 'Stripe', 'stripe.com', [
    endpoint({
      id: 'list-customers',
      name: 'List customers',
      url: 'https://api.stripe.com/v1/customers',
      auth: 'BEARER',
      authenticationOptions: bearer,
      paging: { type: 'CURSOR' },
      queryParameters: [{ name: 'limit', value: '100' }],
      structure: {
        schema: {
          type: 'object',
          properties: { id: { type: 'string' }, email: { type: 'string' }, created: { type: 'integer' } },
        },
        containedInOuterArray: false,
        repeatingElementPath: ['data'],
      },
    }),
  ]),
  flex('openweathermap', 'OpenWeatherMap', 'openweathermap.org', [
    endpoint({
      id: 'current-weather',
      name: 'Current weather',
      url: 'https://api.openweathermap.org/data/2.5/weather',
      auth: 'API_KEY',
      authenticationOptions: apiKey('appid', 'QUERY_PARAMETER'),
      queryParameters: [
        { name: 'q', value: 'London' },
        { name: 'units', value: 'metric' },
      ],
      structure: {
        schema: {
          type: 'object',
          properties: { name: { type: 'string' }, main: { type: 'object' }, weather: { type: 'array' } },
        },
        containedInOuterArray: false,
        repeatingElementPath: [],
      },
    }),
  ]),
  flex('nasa-apod', 'NASA Astronomy Picture of the Day', 'api.nasa.gov', [
    endpoint({
      id: 'pictures',
      name: 'Pictures of a date range',
      url: 'https://api.nasa.gov/planetary/apod',
      auth: 'API_KEY',
      authenticationOptions: apiKey('api_key', 'QUERY_PARAMETER'),
      queryParameters: [{ name: 'start_date', value: '2026-01-01' }, { name: 'end_date' }],
      structure: {
        schema: { type: 'object', properties: { date: { type: 'string' }, title: { type: 'string' }, url: { type: 'string' } } },
        containedInOuterArray: true,
        repeatingElementPath: [],
      },
    }),
  ]),
  flex('newsapi', 'News API', 'newsapi.org', [
    endpoint({
      id: 'top-headlines',
      name: 'Top headlines',
      url: 'https://newsapi.org/v2/top-headlines',
      auth: 'API_KEY',
      authenticationOptions: apiKey('X-Api-Key', 'HEADER_PARAMETER'),
      paging: { type: 'PAGE_NUMBER' },
      queryParameters: [
        { name: 'country', value: 'us' },
        { name: 'pageSize', value: '100' },
      ],
      structure: {
        schema: {
          type: 'object',
          properties: { title: { type: 'string' }, url: { type: 'string' }, publishedAt: { type: 'string' } },
        },
        containedInOuterArray: false,
        repeatingElementPath: ['articles'],
      },
    }),
  ]),
];
