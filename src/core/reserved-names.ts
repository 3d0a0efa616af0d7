/**
 * Names a JavaScript object already answers to (`__proto__`, `constructor`, `toString`, ...). Where a
 * user-chosen name ends up as a key of an object (an agent's vault, a run's variables), such a name would
 * read or write the object's prototype instead of a member. Every store of such keys uses a Map or an
 * object without a prototype; the API also refuses these names where it takes a name that becomes a key.
 */
import type { TSchema } from 'typebox';

export const RESERVED_OBJECT_NAMES: readonly string[] = [...Object.getOwnPropertyNames(Object.prototype), 'prototype'].sort();

const RESERVED = new Set(RESERVED_OBJECT_NAMES);

export function isReservedObjectName(name: string): boolean {
  return RESERVED.has(name);
}

/**
 * Schema keyword that refuses the reserved names (add it to a string schema). `violationsOf` renders its
 * failure as "must not be a name JavaScript objects reserve (...)".
 */
export const NOT_RESERVED_OBJECT_NAME: { not: TSchema } = {
  not: { enum: [...RESERVED_OBJECT_NAMES] } as unknown as TSchema,
};

export const RESERVED_NAME_MESSAGE = `must not be a name JavaScript objects reserve (${RESERVED_OBJECT_NAMES.join(', ')})`;
