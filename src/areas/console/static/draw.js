// Drawings: a pipeline's graph from its file, and a run's steps as a Gantt timeline.
import { h, when, duration } from './ui.js';

const SVG = 'http://www.w3.org/2000/svg';
const svg = (tag, attrs, ...children) => {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  for (const child of children) element.append(child);
  return element;
};

/**
 * The components of a pipeline file and what links them: an orchestration's transitions (success, failure,
 * unconditional) or a transformation's sources.
 */
export function graphOf(document) {
  const components = document?.pipeline?.components ?? {};
  const nodes = Object.entries(components).map(([name, component]) => ({ name, type: component?.type ?? '?' }));
  const edges = [];
  for (const [name, component] of Object.entries(components)) {
    for (const kind of ['success', 'failure', 'unconditional']) {
      for (const to of component?.transitions?.[kind] ?? []) edges.push({ from: name, to, kind });
    }
    for (const from of component?.sources ?? []) edges.push({ from, to: name, kind: 'source' });
  }
  return { type: document?.type ?? 'unknown', nodes, edges };
}

const EDGE_COLOURS = { success: '#1a7f37', failure: '#b42318', unconditional: '#4a5260', source: '#0b5cad' };

/** Columns by depth from the components nothing leads to; an SVG drawing plus the same facts as a list. */
export function drawGraph(graph) {
  const depth = new Map();
  const incoming = new Set(graph.edges.map((edge) => edge.to));
  const queue = graph.nodes.filter((node) => !incoming.has(node.name)).map((node) => node.name);
  for (const name of queue) depth.set(name, 0);
  for (let i = 0; i < queue.length; i += 1) {
    const from = queue[i];
    for (const edge of graph.edges.filter((e) => e.from === from)) {
      if (!depth.has(edge.to) && graph.nodes.some((n) => n.name === edge.to)) {
        depth.set(edge.to, depth.get(from) + 1);
        queue.push(edge.to);
      }
    }
  }
  for (const node of graph.nodes) if (!depth.has(node.name)) depth.set(node.name, 0);
  const columns = [];
  for (const node of graph.nodes) (columns[depth.get(node.name)] ??= []).push(node);
  const W = 170,
    H = 46,
    GX = 60,
    GY = 24;
  const at = new Map();
  columns.forEach((column, x) => column.forEach((node, y) => at.set(node.name, { x: 10 + x * (W + GX), y: 10 + y * (H + GY) })));
  const width = 20 + columns.length * (W + GX);
  const height = 20 + Math.max(1, ...columns.map((c) => c.length)) * (H + GY);
  const drawing = svg('svg', {
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': `Graph of ${graph.nodes.length} components and ${graph.edges.length} links`,
  });
  for (const edge of graph.edges) {
    const a = at.get(edge.from),
      b = at.get(edge.to);
    if (!a || !b) continue;
    drawing.append(
      svg('line', {
        x1: a.x + W,
        y1: a.y + H / 2,
        x2: b.x,
        y2: b.y + H / 2,
        stroke: EDGE_COLOURS[edge.kind],
        'stroke-width': 2,
        'stroke-dasharray': edge.kind === 'unconditional' ? '5 3' : 'none',
      }),
    );
  }
  for (const node of graph.nodes) {
    const { x, y } = at.get(node.name);
    drawing.append(
      svg(
        'g',
        { 'data-component': node.name },
        svg('rect', { x, y, width: W, height: H, rx: 6, fill: '#fff', stroke: '#4a5260' }),
        svg('text', { x: x + 8, y: y + 18 }, node.name.length > 24 ? `${node.name.slice(0, 23)}…` : node.name),
        svg('text', { x: x + 8, y: y + 36, fill: '#4a5260' }, node.type),
      ),
    );
  }
  const list = h(
    'details',
    {},
    h('summary', {}, 'Components and links as a list'),
    h(
      'ul',
      {},
      graph.edges.map((edge) => h('li', {}, `${edge.from} → ${edge.to} (${edge.kind})`)),
    ),
  );
  return h('div', {}, h('div', { className: 'graph' }, drawing), list);
}

function childName(child) {
  if (!child) return null;
  if (typeof child === 'string') return child;
  return child.pipelineName ?? child.name ?? child.pipelineExecutionId ?? JSON.stringify(child);
}

/** A Gantt of the steps: one bar a step across the run's span; steps of a child pipeline nested under it. */
export function drawGantt(steps, run) {
  const times = steps.flatMap((step) => [step.result?.startedAt, step.result?.finishedAt]).filter(Boolean);
  const start = Math.min(...[run.startedAt, ...times].filter(Boolean).map((t) => Date.parse(t)));
  const end = Math.max(
    Date.now() * (run.finishedAt ? 0 : 1),
    ...[run.finishedAt, ...times].filter(Boolean).map((t) => Date.parse(t)),
  );
  const span = Math.max(1, end - start);
  const row = (step) => {
    const result = step.result ?? {};
    const from = result.startedAt ? Date.parse(result.startedAt) : start;
    const to = result.finishedAt ? Date.parse(result.finishedAt) : end;
    const left = ((from - start) / span) * 100;
    const width = Math.max(0.5, ((to - from) / span) * 100);
    const label = `${step.name}: ${result.status}, ${duration(result.startedAt, result.finishedAt)}${result.message ? ` — ${result.message}` : ''}`;
    const bar = h('div', { className: `bar ${result.status}`, title: label });
    bar.style.left = `${left}%`;
    bar.style.width = `${Math.min(width, 100 - left)}%`;
    return h(
      'li',
      { className: 'row', 'data-step': step.name, 'data-status': result.status },
      h('span', { className: 'name' }, step.name, ' ', h('span', { className: `badge s-${result.status}` }, result.status)),
      h('div', { className: 'track', role: 'img', 'aria-label': label }, bar),
    );
  };
  const items = [];
  let group = null;
  for (const step of steps) {
    const child = childName(step.childPipeline);
    if (!child) {
      group = null;
      items.push(row(step));
    } else {
      if (!group || group.name !== child) {
        group = { name: child, list: h('ul', { className: 'gantt child', 'aria-label': `Child pipeline ${child}` }) };
        items.push(h('li', {}, h('span', { className: 'muted' }, `child pipeline ${child}`), group.list));
      }
      group.list.append(row(step));
    }
  }
  return h(
    'div',
    {},
    h('p', { className: 'muted' }, `${when(new Date(start).toISOString())} → ${run.finishedAt ? when(run.finishedAt) : 'now'}`),
    h('ul', { className: 'gantt', 'aria-label': 'Step timeline' }, items),
  );
}
