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

/** A string (or a member's name) holding a NUL character, or nesting past MAX_DEPTH, where `value` has one; undefined when none. */
function bodyIssueIn(value: unknown, depth = 0): BodyIssue | undefined {
  if (typeof value === 'string')
    return value.includes('\u0000') ? { at: '', message: 'must not contain a NUL character' } : undefined;
  if (typeof value !== 'object' || value === null) return undefined;
  if (depth >= MAX_DEPTH) return { at: '', message: `must not be nested more than ${MAX_DEPTH} levels deep` };
  for (const key in value) {
    const at = `/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    // A member's name too (a map of paths, of variables): stored or echoed like any string.
    if (key.includes('\u0000')) return { at, message: 'must not have a NUL character in its name' };
    const found = bodyIssueIn((value as Record<string, unknown>)[key], depth + 1);
    if (found) return { ...found, at: `${at}${found.at}` };
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

/**
 * Compilations put off until first use (validators here, response serializers in app.ts), until they run:
 * a server compiles the schemas of the routes it is asked, not all of them at start (each compiled check or
 * serializer is generated code the process keeps, some 20 MB for every route).
 */
const putOff = new Set<() => unknown>();

/** `build()`'s result, built on the first call of the function answered. */
export function builtOnFirstUse<T>(build: () => T): () => T {
  let built: { value: T } | undefined;
  const get = () => {
    if (!built) {
      built = { value: build() };
      putOff.delete(get);
    }
    return built.value;
  };
  putOff.add(get);
  return get;
}

/** Compiles every check and serializer not compiled yet; answers how many (a test shows every schema compiles). */
export function compileEverySchemaNow(): number {
  const pending = [...putOff];
  for (const get of pending) get();
  return pending.length;
}

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const compiled = builtOnFirstUse(() =>
    httpPart === 'body'
      ? refusingUnsafeValues(exact.compile(schema as object))
      : refusingUnsafeValues(
          coercing.compile(httpPart === 'headers' ? lowerCaseNames(schema as ObjectSchema) : (schema as object)),
        ),
  );
  const validate = ((data: unknown) => {
    const check = compiled();
    const valid = check(data);
    validate.errors = check.errors;
    return valid;
  }) as ValidateFunction;
  return validate;
};
