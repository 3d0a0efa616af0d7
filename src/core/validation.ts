import type { FastifySchemaCompiler } from 'fastify';
import { Ajv, type Options } from 'ajv';
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

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  if (httpPart === 'body') return exact.compile(schema as object);
  return coercing.compile(httpPart === 'headers' ? lowerCaseNames(schema as ObjectSchema) : (schema as object));
};
