// A few DOM helpers: elements are built with textContent only (never innerHTML), so no answer can inject markup.

/** h('a', {href}, 'text', child, ...): an element; `on*` attributes are listeners, false/null ones are left out. */
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else if (name === 'className') element.className = value;
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export const badge = (status) => h('span', { className: `badge s-${status}` }, status);

export function when(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  return date.toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
}

export function duration(startIso, endIso) {
  if (!startIso) return '';
  const ms = (endIso ? new Date(endIso) : new Date()) - new Date(startIso);
  if (ms < 1000) return `${ms} ms`;
  const s = Math.round(ms / 1000);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

export function table(headers, rows, caption) {
  return h(
    'div',
    { className: 'scroll' },
    h(
      'table',
      {},
      caption ? h('caption', { className: 'muted' }, caption) : null,
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          headers.map((header) => h('th', { scope: 'col' }, header)),
        ),
      ),
      h(
        'tbody',
        {},
        rows.map((cells) =>
          h(
            'tr',
            {},
            cells.map((cell) => h('td', {}, cell)),
          ),
        ),
      ),
    ),
  );
}

/** A labelled form control: the label wraps it, so it is named for assistive technology. */
export function field(label, control) {
  return h('label', {}, label, control);
}

export function select(name, options, value) {
  return h(
    'select',
    { name },
    options.map(([optionValue, text]) => h('option', { value: optionValue, selected: optionValue === value }, text)),
  );
}

export function say(text) {
  const status = document.getElementById('status');
  status.textContent = text;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => (status.textContent = ''), 5000);
}

export const errorBox = (error) => h('p', { className: 'error', role: 'alert' }, error.message);
