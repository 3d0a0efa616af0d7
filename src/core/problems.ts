import { Type, type Static } from 'typebox';

/**
 * The one error shape of the API (RFC 9457 problem details with the specification's fields).
 * Handlers throw a ProblemError; the error handler in errors-plugin.ts renders every failure,
 * ours or the framework's, through problemBody().
 */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** Title of each status the API answers with; the problem type is its kebab-case form. */
export const STATUS_TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  406: 'Not Acceptable',
  408: 'Request Timeout',
  409: 'Conflict',
  410: 'Gone',
  412: 'Precondition Failed',
  413: 'Payload Too Large',
  414: 'URI Too Long',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Entity',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

export const ProblemDetail = Type.Object(
  {
    type: Type.String({ description: 'problem type: {problem_type_base}/<kebab-case-name>' }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String(),
    instance: Type.String({ description: 'the request path that failed' }),
    violations: Type.Optional(Type.Array(Type.String())),
    scimType: Type.Optional(Type.String({ description: 'SCIM operations only: the RFC 7644 scimType of the error' })),
  },
  {
    $id: 'ProblemDetail',
    examples: [
      {
        type: 'https://platform-api.dev/problems/bad-request',
        title: 'Bad Request',
        status: 400,
        detail: 'The request is not valid.',
        instance: '/dpc/v1/projects',
        violations: ['body.name: must NOT have fewer than 1 characters'],
      },
    ],
  },
);
export type ProblemDetail = Static<typeof ProblemDetail>;

export interface ProblemOptions {
  violations?: string[];
  /** kebab-case name for a problem more specific than its status, e.g. "migration-in-progress". */
  name?: string;
  headers?: Record<string, string>;
  /** SCIM operations (RFC 7644 3.12): the error's scimType, answered in either error format. */
  scimType?: string;
}

export class ProblemError extends Error {
  readonly status: number;
  readonly options: ProblemOptions;
  constructor(status: number, detail: string, options: ProblemOptions = {}) {
    super(detail);
    this.status = status;
    this.options = options;
  }
}

export const badRequest = (detail: string, violations?: string[]) => new ProblemError(400, detail, { violations });
export const forbidden = (detail: string) => new ProblemError(403, detail);
export const notFound = (detail: string) => new ProblemError(404, detail);
export const conflict = (detail: string) => new ProblemError(409, detail);
export const unprocessable = (detail: string, violations?: string[]) => new ProblemError(422, detail, { violations });

export function kebab(title: string): string {
  return title
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-|-$/g, '');
}

export function problemBody(
  typeBase: string,
  status: number,
  detail: string,
  instance: string,
  options: Pick<ProblemOptions, 'violations' | 'name' | 'scimType'> = {},
): ProblemDetail {
  const title = STATUS_TITLES[status] ?? (status >= 500 ? 'Internal Server Error' : 'Bad Request');
  const body: ProblemDetail = {
    type: `${typeBase}/${options.name ?? kebab(title)}`,
    title,
    status,
    detail,
    instance,
  };
  if (options.violations?.length) body.violations = options.violations;
  if (options.scimType) body.scimType = options.scimType;
  return body;
}

/**
 * A whole HTTP/1.1 problem answer as raw bytes, for failures of the HTTP parser itself (a malformed
 * header, headers over the limit), which come before any request exists to answer through.
 */
export function rawProblemResponse(typeBase: string, status: number, detail: string): string {
  const body = JSON.stringify(problemBody(typeBase, status, detail, ''));
  return (
    `HTTP/1.1 ${status} ${STATUS_TITLES[status]}\r\n` +
    `Content-Type: ${PROBLEM_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}
