import { Composer, isAlias, isMap, isPair, isSeq, LineCounter, Parser, type CST, type Document, type Node } from 'yaml';

/** Bounds on a YAML document read from user content. */
export interface YamlBounds {
  /** Largest text, in bytes (UTF-8). */
  maxBytes: number;
  /** Most nodes the document holds once its aliases are expanded. */
  maxNodes: number;
  /** Deepest nesting of collections (mappings and sequences) the text may have. */
  maxDepth: number;
}

/** A real pipeline file nests a dozen levels at most; 100 stays far below what would overflow the stack. */
export const PIPELINE_YAML_BOUNDS: YamlBounds = { maxBytes: 1024 * 1024, maxNodes: 100_000, maxDepth: 100 };

/** The parsed value, or why the text is refused. */
export type BoundedYaml = { value: unknown } | { refused: string };

/**
 * Parses YAML from user content within bounds of time and memory. Composing a document and converting it
 * recurse once per level of nesting, so the nesting is measured first, on the parser's tokens (read
 * without recursion), and a text nested past `maxDepth` is refused before it is composed (else the answer
 * would be a stack overflow). Parsing itself is linear in the text; what is not is expanding aliases (a
 * "billion laughs" file of a few hundred bytes expands to billions of nodes, and counting its aliases the
 * naive way is exponential too). So the expanded size is counted next, each anchored node once, and a
 * document past `maxNodes` is refused before anything is expanded; the reason says whether aliases are
 * what make it so large.
 */
export function parseBoundedYaml(text: string, bounds: YamlBounds): BoundedYaml {
  if (Buffer.byteLength(text, 'utf8') > bounds.maxBytes) return { refused: `larger than ${bounds.maxBytes} bytes` };
  // Parsed once: the tokens are measured, then composed into the document (what parseDocument does).
  const lines = new LineCounter();
  const tokens = [...new Parser(lines.addNewLine).parse(text)];
  if (nestingDepth(tokens, bounds.maxDepth) > bounds.maxDepth) {
    return { refused: `nested more than ${bounds.maxDepth} levels deep` };
  }
  const documents = [...new Composer({ uniqueKeys: false }).compose(tokens, true, text.length)];
  const document = documents[0];
  if (documents.length > 1) return { refused: 'not valid YAML: it holds more than one document' };
  if (document.errors.length > 0) {
    const error = document.errors[0];
    const { line, col } = lines.linePos(error.pos[0]);
    return { refused: `not valid YAML: ${error.message.split('\n')[0]} at line ${line}, column ${col}` };
  }
  const size = expandedSize(document, bounds.maxNodes);
  if (size.nodes > bounds.maxNodes) {
    return {
      refused: size.aliases
        ? `larger than ${bounds.maxNodes} YAML nodes once its aliases are expanded`
        : `larger than ${bounds.maxNodes} YAML nodes`,
    };
  }
  // Within the bound, so the library's own (costly) alias count check is not needed.
  return { value: document.toJS({ maxAliasCount: -1 }) };
}

/** The deepest nesting of collections among the text's tokens, counted up to just past `limit`; no recursion. */
function nestingDepth(tokens: CST.Token[], limit: number): number {
  let deepest = 0;
  for (const token of tokens) {
    if (token.type !== 'document' || token.value === undefined) continue;
    const waiting: [CST.Token, number][] = [[token.value, 0]];
    while (waiting.length > 0) {
      const [next, depth] = waiting.pop()!;
      if (next.type !== 'block-map' && next.type !== 'block-seq' && next.type !== 'flow-collection') continue;
      deepest = Math.max(deepest, depth + 1);
      if (deepest > limit) return deepest;
      for (const item of next.items as { key?: CST.Token | null; value?: CST.Token }[]) {
        if (item.key) waiting.push([item.key, depth + 1]);
        if (item.value) waiting.push([item.value, depth + 1]);
      }
    }
  }
  return deepest;
}

/**
 * Nodes of the document with every alias expanded, counted up to just past `limit`, and whether it holds
 * an alias. The text's nesting is bounded before this runs, so only aliases (one that names a node it is
 * inside expands without end) can take the walk deeper than that.
 */
function expandedSize(document: Document, limit: number): { nodes: number; aliases: boolean } {
  const sizes = new Map<unknown, number>();
  let aliases = false;
  const size = (node: unknown, depth: number): number => {
    if (depth > 1000) return limit + 1;
    const known = sizes.get(node);
    if (known !== undefined) return known;
    let total = 1;
    if (isAlias(node)) {
      aliases = true;
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
  const nodes = size(document.contents as Node | null, 0);
  return { nodes, aliases };
}
