import type { FastifySchemaCompiler } from 'fastify';
import { Ajv, type ErrorObject, type Options, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';

const common: Options = { allErrors: true, useDefaults: true, removeAdditional: true, strict: false };

function ajv(options: Options): Ajv {
  const instance = new Ajv({ ...common, ...options });
  (addFormats as unknown as (a: Ajv) => void)(instance);
  return instance;
}

// Query strings, paths and headers are text, so their values are coerced to the declared types.
// JSON bodies are not: a number sent where a string belongs is an error, never silently "5".
const coercing = ajv({ coerceTypes: 'array' });
// `discriminator`: a oneOf chosen by a property (OpenAPI's), so a bad field is reported in the variant chosen.
const exact = ajv({ coerceTypes: false, discriminator: true });

/** A check of a value against `schema` as request bodies are checked (no coercion; discriminated oneOf). */
export function exactCheck(schema: object): ValidateFunction {
  return exact.compile(schema);
}

interface ObjectSchema {
  properties: Record<string, unknown>;
  required?: string[];
}

/** Node hands header names over in lower case; the schemas spell them as the specification does (versionName). */
function lowerCaseNames(schema: ObjectSchema): ObjectSchema {
  return {
    ...schema,
    properties: Object.fromEntries(Object.entries(schema.properties).map(([name, value]) => [name.toLowerCase(), value])),
    required: schema.required?.map((name) => name.toLowerCase()),
  };
}

/** Deeper than any request of this API nests; a body nested past it is refused rather than walked. */
const MAX_DEPTH = 64;

interface BodyIssue {
  /** JSON pointer to where it is, built on the way back, only when something was found */
  at: string;
  message: string;
}

/** A string holding a NUL character, or nesting past MAX_DEPTH, where `value` has one; undefined when none. */
function bodyIssueIn(value: unknown, depth = 0): BodyIssue | undefined {
  if (typeof value === 'string')
    return value.includes('\u0000') ? { at: '', message: 'must not contain a NUL character' } : undefined;
  if (typeof value !== 'object' || value === null) return undefined;
  if (depth >= MAX_DEPTH) return { at: '', message: `must not be nested more than ${MAX_DEPTH} levels deep` };
  for (const key in value) {
    const found = bodyIssueIn((value as Record<string, unknown>)[key], depth + 1);
    if (found) return { ...found, at: `/${key.replace(/~/g, '~0').replace(/\//g, '~1')}${found.at}` };
  }
  return undefined;
}

/**
 * `validate`, and no string anywhere in the value may hold a NUL character (PostgreSQL's text cannot
 * store one, and the API answers the same on either store), nor may it nest past MAX_DEPTH (code that
 * walks a value must not run out of stack).
 */
function refusingUnsafeValues(validate: ValidateFunction): ValidateFunction {
  const wrapped = ((data: unknown) => {
    wrapped.errors = null;
    if (!validate(data)) {
      wrapped.errors = validate.errors;
      return false;
    }
    const found = bodyIssueIn(data);
    if (!found) return true;
    const issue: ErrorObject = {
      instancePath: found.at,
      schemaPath: '',
      keyword: 'bodyShape',
      params: {},
      message: found.message,
    };
    wrapped.errors = [issue];
    return false;
  }) as ValidateFunction;
  return wrapped;
}

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  if (httpPart === 'body') return refusingUnsafeValues(exact.compile(schema as object));
  return refusingUnsafeValues(
    coercing.compile(httpPart === 'headers' ? lowerCaseNames(schema as ObjectSchema) : (schema as object)),
  );
};
