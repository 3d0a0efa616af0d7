import { isAlias, isMap, isPair, isSeq, parseDocument, type Document, type Node } from 'yaml';

/** Bounds on a YAML document read from user content. */
export interface YamlBounds {
  /** Largest text, in bytes (UTF-8). */
  maxBytes: number;
  /** Most nodes the document holds once its aliases are expanded. */
  maxNodes: number;
}

export const PIPELINE_YAML_BOUNDS: YamlBounds = { maxBytes: 1024 * 1024, maxNodes: 100_000 };

/** The parsed value, or why the text is refused. */
export type BoundedYaml = { value: unknown } | { refused: string };

/**
 * Parses YAML from user content within bounds of time and memory. Parsing itself is linear in the text;
 * what is not is expanding aliases (a "billion laughs" file of a few hundred bytes expands to billions of
 * nodes, and counting its aliases the naive way is exponential too). So the expanded size is counted first,
 * each anchored node once, and a document past `maxNodes` is refused before anything is expanded.
 */
export function parseBoundedYaml(text: string, bounds: YamlBounds): BoundedYaml {
  if (Buffer.byteLength(text, 'utf8') > bounds.maxBytes) return { refused: `larger than ${bounds.maxBytes} bytes` };
  const document = parseDocument(text, { uniqueKeys: false });
  if (document.errors.length > 0) return { refused: `not valid YAML: ${document.errors[0].message.split('\n')[0]}` };
  if (expandedSize(document, bounds.maxNodes) > bounds.maxNodes) {
    return { refused: `its aliases expand past ${bounds.maxNodes} nodes` };
  }
  // Within the bound, so the library's own (costly) alias count check is not needed.
  return { value: document.toJS({ maxAliasCount: -1 }) };
}

/** Nodes of the document with every alias expanded, counted up to just past `limit`. */
function expandedSize(document: Document, limit: number): number {
  const sizes = new Map<unknown, number>();
  const size = (node: unknown, depth: number): number => {
    if (depth > 1000) return limit + 1; // nesting this deep is an attack, not a pipeline
    const known = sizes.get(node);
    if (known !== undefined) return known;
    let total = 1;
    if (isAlias(node)) {
      const source = node.resolve(document);
      total = source ? size(source, depth + 1) : 1;
    } else if (isMap(node) || isSeq(node)) {
      for (const item of node.items as unknown[]) {
        total += size(item, depth + 1);
        if (total > limit) break;
      }
    } else if (isPair(node)) {
      total += size(node.key, depth + 1) + size(node.value, depth + 1);
    }
    const bounded = Math.min(total, limit + 1);
    sizes.set(node, bounded);
    return bounded;
  };
  return size(document.contents as Node | null, 0);
}
