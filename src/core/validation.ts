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
const exact = ajv({ coerceTypes: false });

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

/** Where in `value` a string holds a NUL character (as a JSON pointer), or undefined when none does. */
function nulCharacterAt(value: unknown): string | undefined {
  if (typeof value === 'string') return value.includes('\u0000') ? '' : undefined;
  if (typeof value !== 'object' || value === null) return undefined;
  for (const key in value) {
    // The pointer is built on the way back, only when something was found.
    const found = nulCharacterAt((value as Record<string, unknown>)[key]);
    if (found !== undefined) return `/${key.replace(/~/g, '~0').replace(/\//g, '~1')}${found}`;
  }
  return undefined;
}

/**
 * `validate`, and no string anywhere in the value may hold a NUL character: PostgreSQL's text cannot
 * store one, and the API answers the same on either store.
 */
function refusingNulCharacters(validate: ValidateFunction): ValidateFunction {
  const wrapped = ((data: unknown) => {
    wrapped.errors = null;
    if (!validate(data)) {
      wrapped.errors = validate.errors;
      return false;
    }
    const at = nulCharacterAt(data);
    if (at === undefined) return true;
    const issue: ErrorObject = {
      instancePath: at,
      schemaPath: '',
      keyword: 'nulCharacter',
      params: {},
      message: 'must not contain a NUL character',
    };
    wrapped.errors = [issue];
    return false;
  }) as ValidateFunction;
  return wrapped;
}

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  if (httpPart === 'body') return refusingNulCharacters(exact.compile(schema as object));
  return refusingNulCharacters(
    coercing.compile(httpPart === 'headers' ? lowerCaseNames(schema as ObjectSchema) : (schema as object)),
  );
};
