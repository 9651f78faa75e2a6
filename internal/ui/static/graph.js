// graph.js draws an entity's lifecycle as an SVG graph: the provider's
// states and the transitions its event types allow, with the entity's
// current state, the events applied to it (numbered, in order) and the
// events deferred for it (dashed, from the states they wait for).

import { s } from './dom.js';

const W = 140, H = 34, GX = 50, GY = 26, PAD = 24, TOP = 80;

// layers places states in columns by the longest path from the initial
// state over the edges that go forward in the lifecycle's declared order
// of states (its authors list them in the order the entity moves); the
// others (a failed payment tried again, a capture) close a cycle and are
// drawn under the nodes.
function layers(states, edges) {
  const index = Object.fromEntries(states.map((st, i) => [st, i]));
  const depth = Object.fromEntries(states.map((st) => [st, 0]));
  const forward = edges.filter((e) => e.from in index && e.to in index && index[e.to] > index[e.from])
    .sort((a, b) => index[a.from] - index[b.from]);
  for (const e of forward) depth[e.to] = Math.max(depth[e.to], depth[e.from] + 1);
  return depth;
}

// path is the SVG path of an edge between two placed nodes.
function path(a, b, bend) {
  if (a === b) { // a loop above the node
    const x = a.x + W / 2, y = a.y;
    return `M ${x - 14} ${y} C ${x - 30} ${y - 34}, ${x + 30} ${y - 34}, ${x + 14} ${y}`;
  }
  if (b.col > a.col) {
    // An edge that skips columns arcs over the nodes between.
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, dx = (x2 - x1) / 2;
    const lift = b.col - a.col > 1 && a.row === b.row ? Math.min(25 * (b.col - a.col), 70) : 0;
    return `M ${x1} ${y1} C ${x1 + dx} ${y1 + bend - lift}, ${x2 - dx} ${y2 + bend - lift}, ${x2} ${y2}`;
  }
  // Backwards or within a column: under the nodes.
  const x1 = a.x + W / 2 + 8, y1 = a.y + H, x2 = b.x + W / 2 - 8, y2 = b.y + H;
  const drop = 30 + 12 * Math.abs(a.col - b.col) + Math.abs(a.row - b.row) * 6;
  return `M ${x1} ${y1} C ${x1} ${Math.max(y1, y2) + drop}, ${x2} ${Math.max(y1, y2) + drop}, ${x2} ${y2}`;
}

// lifecycleGraph returns the <svg> of lifecycle (a Provider's Lifecycle)
// for an entity at state, with applied (AppliedEvent[]) and deferred
// (DeferredEvent[]) events marked.
export function lifecycleGraph(lifecycle, state, applied, deferred) {
  const states = lifecycle.states || [];
  const edges = [];
  for (const ev of lifecycle.events || []) {
    for (const from of ev.fromStates || []) edges.push({ from, to: ev.toState, type: ev.eventType });
  }
  const depth = layers(states, edges);
  const cols = [];
  const pos = {};
  for (const st of states) {
    const c = depth[st];
    cols[c] = cols[c] || [];
    pos[st] = { col: c, row: cols[c].length, x: PAD + c * (W + GX), y: TOP + cols[c].length * (H + GY) };
    cols[c].push(st);
  }
  const width = PAD * 2 + cols.length * (W + GX) - GX;
  const height = TOP + PAD + Math.max(...cols.map((c) => c.length)) * (H + GY) + 70;

  const toOf = Object.fromEntries((lifecycle.events || []).map((ev) => [ev.eventType, ev.toState]));
  const svg = s('svg', { viewBox: `0 0 ${width} ${height}`, width, height, class: 'graph', role: 'img', 'aria-label': 'lifecycle ' + lifecycle.name });
  svg.append(s('defs', {},
    ['plain', 'applied', 'deferred', 'lost'].map((k) => s('marker', { id: 'arrow-' + k, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse', class: 'm-' + k },
      s('path', { d: 'M 0 0 L 10 5 L 0 10 z' })))));

  // Every allowed transition, faint: one line per (from, to), titled with
  // the event types that take it.
  const pairs = new Map();
  for (const e of edges) {
    const k = e.from + '\u0000' + e.to;
    pairs.set(k, (pairs.get(k) || []).concat(e.type));
  }
  for (const [k, types] of pairs) {
    const [from, to] = k.split('\u0000');
    if (!pos[from] || !pos[to]) continue;
    svg.append(s('path', { d: path(pos[from], pos[to], 0), class: 'edge', 'marker-end': 'url(#arrow-plain)' }, s('title', {}, from + ' → ' + to + ': ' + types.join(', '))));
  }

  // The applied events, in order.
  const labels = [];
  (applied || []).forEach((a, i) => {
    if (!pos[a.fromState] || !pos[a.toState]) return;
    svg.append(s('path', { d: path(pos[a.fromState], pos[a.toState], -6), class: 'edge applied', 'data-event': a.eventType, 'marker-end': 'url(#arrow-applied)' },
      s('title', {}, `${i + 1}. ${a.eventType} (${a.key}) applied: ${a.fromState} → ${a.toState}`)));
    labels.push({ from: pos[a.fromState], to: pos[a.toState], text: `${i + 1}. ${a.eventType}`, cls: 'applied' });
  });
  // The deferred events not applied yet, from each state they wait for.
  for (const d of deferred || []) {
    if (d.applied || d.superseded) continue;
    const to = toOf[d.eventType];
    const kind = d.lost ? 'lost' : 'deferred';
    for (const from of d.awaiting || []) {
      if (!pos[from] || !pos[to]) continue;
      svg.append(s('path', { d: path(pos[from], pos[to], 8), class: 'edge ' + kind, 'data-event': d.eventType, 'marker-end': `url(#arrow-${kind})` },
        s('title', {}, `${d.eventType} (${d.key}) deferred ×${d.count || 1}, waits for ${from}${d.ready ? ' (ready)' : ''}${d.lost ? ' (lost)' : ''}`)));
    }
    const from = (d.awaiting || [])[0];
    if (pos[from] && pos[to]) labels.push({ from: pos[from], to: pos[to], text: `${d.eventType} deferred ×${d.count || 1}${d.ready ? ', ready' : ''}${d.lost ? ', lost' : ''}`, cls: kind });
  }

  for (const st of states) {
    const p = pos[st];
    const cls = ['node', st === states[0] ? 'initial' : '', st === state ? 'current' : ''].filter(Boolean).join(' ');
    svg.append(s('g', { class: cls, 'data-state': st },
      s('rect', { x: p.x, y: p.y, width: W, height: H, rx: 8 }),
      s('text', { x: p.x + W / 2, y: p.y + H / 2 + 5, 'text-anchor': 'middle' }, st)));
  }
  // Labels last, over the lines, stacked where they would collide.
  const used = [];
  for (const l of labels) {
    let x = (l.from.x + l.to.x + W) / 2, y = Math.min(l.from.y, l.to.y) - 8;
    if (l.to.col - l.from.col > 1 && l.from.row === l.to.row) y -= Math.min(25 * (l.to.col - l.from.col), 70) * 0.75;
    if (l.from === l.to) y = l.from.y - 30;
    while (used.some((u) => Math.abs(u.x - x) < 150 && Math.abs(u.y - y) < 14)) y -= 14;
    y = Math.max(12, y);
    used.push({ x, y });
    svg.append(s('text', { x, y, 'text-anchor': 'middle', class: 'label ' + l.cls }, l.text));
  }
  return svg;
}
