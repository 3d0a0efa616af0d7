/**
 * The bounds on the arguments of a tool call, checked before they are stored: the stored conversation is
 * JSON, and JSON.stringify recurses, so arguments nested without bound would end the step with a
 * RangeError instead of reaching the tool. Arguments past a bound are answered to the model as an error
 * (as a bad argument is) and stored as a short excerpt of the text.
 */

/** Deepest nesting of objects and arrays in a tool call's arguments. */
export const MAX_ARGUMENT_DEPTH = 64;
/** Largest tool call arguments, in bytes of JSON text. */
export const MAX_ARGUMENT_BYTES = 8 * 1024 * 1024;
/** Characters of refused arguments kept in the conversation. */
const EXCERPT_CHARS = 1024;

export type CheckedArguments =
  /** The arguments as JSON, or the text as written when it is not JSON (the tool then refuses it). */
  | { value: unknown }
  /** Arguments past a bound: `error` goes back to the model, `excerpt` is what is stored of them. */
  | { error: string; excerpt: string };

/** The arguments of a tool call written as `text` (JSON, if the model behaves), checked against the bounds. */
export function checkedArguments(text: string): CheckedArguments {
  const refused = (error: string): CheckedArguments => ({
    error,
    excerpt: text.length > EXCERPT_CHARS ? `${text.slice(0, EXCERPT_CHARS)}...` : text,
  });
  if (Buffer.byteLength(text, 'utf8') > MAX_ARGUMENT_BYTES) {
    return refused(`The arguments are larger than ${MAX_ARGUMENT_BYTES} bytes; send smaller arguments.`);
  }
  if (depthOfJsonText(text) > MAX_ARGUMENT_DEPTH) {
    return refused(`The arguments are nested deeper than ${MAX_ARGUMENT_DEPTH} levels; send flatter arguments.`);
  }
  try {
    return { value: JSON.parse(text || '{}') };
  } catch {
    return { value: text };
  }
}

/**
 * The deepest nesting of brackets in JSON text, outside strings, counted without parsing (and so without
 * recursion). Text that is not JSON is counted all the same: it is stored as a string, but a bound on
 * what is stored is a bound all the same.
 */
export function depthOfJsonText(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let index = 0; index < text.length; index += 1) {
    const char = text.charCodeAt(index);
    if (inString) {
      if (char === 0x5c)
        index += 1; // backslash: the next character is escaped
      else if (char === 0x22) inString = false;
    } else if (char === 0x22) {
      inString = true;
    } else if (char === 0x7b || char === 0x5b) {
      depth += 1;
      if (depth > deepest) deepest = depth;
    } else if (char === 0x7d || char === 0x5d) {
      depth -= 1;
    }
  }
  return deepest;
}

/**
 * The JSON text of arguments a model server sent as a JSON value rather than as text. A value nested too
 * deep for JSON.stringify is answered as text that is too deep all the same (checkedArguments refuses it).
 */
export function argumentsTextOf(value: unknown): string {
  try {
    return JSON.stringify(value ?? {});
  } catch (error) {
    if (error instanceof RangeError) return '['.repeat(MAX_ARGUMENT_DEPTH + 1) + ']'.repeat(MAX_ARGUMENT_DEPTH + 1);
    throw error;
  }
}
