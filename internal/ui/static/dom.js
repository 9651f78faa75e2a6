// dom.js: the page builds its DOM from elements and text nodes only (nothing
// parsed as markup), so keys, event types and holders, which a webhook's sender
// chose, are shown as text and never run.

const svgNS = 'http://www.w3.org/2000/svg';

// h makes an element: attrs sets attributes (class, href, data-*), and
// children are nodes or strings (made text nodes); null and false are
// skipped, arrays flattened.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  return fill(el, attrs, children);
}

// s is h for SVG elements.
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(svgNS, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// short drops an enum's prefix: EVENT_STATE_SETTLED → SETTLED.
export function short(v) {
  return String(v || '').replace(/^(OUTCOME|REASON|EVENT_STATE|KEY_SOURCE|TIER|AUDIT_OP)_/, '');
}

// badge is an enum value as a coloured tag.
export function badge(v, extra) {
  const t = short(v);
  return t ? h('span', { class: 'badge b-' + t.toLowerCase() + (extra ? ' ' + extra : '') }, t) : '';
}

// when formats an RFC 3339 time as UTC to the second.
export function when(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

// ago says how long before now t was ("3m 2s ago") or after ("in 40s").
export function ago(ts, now) {
  if (!ts) return '';
  const ms = now.getTime() - new Date(ts).getTime();
  return ms >= 0 ? span(ms) + ' ago' : 'in ' + span(-ms);
}

// span is a duration in its two largest units: "2h 5m", "40s".
export function span(ms) {
  const secs = Math.round(ms / 1000);
  const units = [[Math.floor(secs / 86400), 'd'], [Math.floor(secs % 86400 / 3600), 'h'], [Math.floor(secs % 3600 / 60), 'm'], [secs % 60, 's']];
  const first = units.findIndex(([n]) => n > 0);
  if (first < 0) return '0s';
  return units.slice(first, first + 2).filter(([n]) => n > 0).map(([n, u]) => n + u).join(' ');
}

// bytes shows a base64 bytes field: as text when it is printable UTF-8,
// else as hex.
export function bytes(b64, asHex) {
  if (!b64) return '';
  let raw;
  try { raw = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)); } catch (e) { return b64; }
  if (!asHex) {
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(raw);
      if (!/[\u0000-\u0008\u000e-\u001f\u007f]/.test(text)) return text.length > 400 ? text.slice(0, 400) + '… (' + raw.length + ' bytes)' : text;
    } catch (e) { /* not UTF-8: hex below */ }
  }
  const hex = Array.from(raw.slice(0, 64), (x) => x.toString(16).padStart(2, '0')).join('');
  return raw.length > 64 ? hex + '… (' + raw.length + ' bytes)' : hex;
}

// link is a same-page link with query params (URLSearchParams escapes them).
export function link(params, ...children) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  return h('a', { href: '?' + q.toString(), class: 'nav' }, ...children);
}

// table makes a table of rows; cols is [[header, row => cell]].
export function table(cols, rows, attrs) {
  return h('table', attrs || {},
    h('thead', {}, h('tr', {}, cols.map(([name]) => h('th', {}, name)))),
    h('tbody', {}, rows.map((r) => h('tr', r._class ? { class: r._class } : {}, cols.map(([, f]) => h('td', {}, f(r)))))));
}

// dl makes a definition list of [term, value] pairs, skipping empty values.
export function dl(pairs, attrs) {
  return h('dl', attrs || {}, pairs.filter(([, v]) => v !== '' && v !== undefined && v !== null && v !== false)
    .map(([k, v]) => [h('dt', {}, k), h('dd', { 'data-field': k }, v)]));
}
