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

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) =>
  (httpPart === 'body' ? exact : coercing).compile(schema as object);
