// rates.js: live outcome rates per namespace and provider, from the
// claimd_claims_total counters of /metrics, read every few seconds. Only
// /metrics counts the answers claimd gives (a duplicate writes no record,
// so the records of ListClaims cannot tell them); reading it needs the
// metrics (or admin) role, and the view says so when the principal lacks it.

import { metrics, APIError } from './api.js';
import { h, short, table } from './dom.js';

export const interval = 5000;

const labelRe = /(\w+)="((?:[^"\\]|\\.)*)"/g;

// parse sums claimd_claims_total by namespace, provider and outcome, and
// reads the deferred gauges.
export function parse(text) {
  const sums = new Map();
  const gauges = {};
  for (const line of text.split('\n')) {
    if (line.startsWith('claimd_claims_total{')) {
      const close = line.lastIndexOf('}');
      const labels = {};
      for (const m of line.slice(0, close).matchAll(labelRe)) labels[m[1]] = m[2];
      const v = parseFloat(line.slice(close + 1).trim().split(' ')[0]);
      if (!labels.namespace && !labels.provider) continue; // refused before a namespace was read
      const k = [labels.namespace, labels.provider, labels.outcome].join('\u0000');
      sums.set(k, (sums.get(k) || 0) + v);
    } else {
      const m = /^(claimd_deferred_(?:events|overdue_events|lost_events)) ([0-9.eE+-]+)/.exec(line);
      if (m) gauges[m[1]] = parseFloat(m[2]);
    }
  }
  return { sums, gauges };
}

// Rates keeps the last scrape to turn counters into rates.
export class Rates {
  constructor() { this.prev = null; this.reads = 0; }

  async render(namespace) {
    let scrape;
    try {
      scrape = await metrics();
    } catch (err) {
      if (err instanceof APIError && (err.status === 401 || err.status === 403)) {
        return h('article', { id: 'rates-view' }, h('h2', {}, 'Outcome rates'),
          h('p', { class: 'note warn', id: 'rates-denied' }, `This principal may not read /metrics (HTTP ${err.status}): outcome rates need the metrics or admin role in the auth file. ` +
            'The other views need only the read role.'));
      }
      throw err;
    }
    const at = performance.now();
    this.reads++;
    const cur = parse(scrape.text);
    const prev = this.prev;
    this.prev = { at, sums: cur.sums };
    const outcomes = [...new Set([...cur.sums.keys()].map((k) => k.split('\u0000')[2]))].sort();
    const rows = new Map();
    for (const [k, v] of cur.sums) {
      const [ns, p, o] = k.split('\u0000');
      const rk = ns + '\u0000' + p;
      if (!rows.has(rk)) rows.set(rk, { ns, p, total: {}, rate: {}, _class: ns === namespace ? 'mine' : '' });
      const r = rows.get(rk);
      r.total[o] = v;
      if (prev) r.rate[o] = Math.max(0, v - (prev.sums.get(k) || 0)) / ((at - prev.at) / 1000);
    }
    const list = [...rows.values()].sort((a, b) => (b.ns === namespace) - (a.ns === namespace) || a.ns.localeCompare(b.ns) || a.p.localeCompare(b.p));
    const g = cur.gauges;
    return h('article', { id: 'rates-view', 'data-reads': this.reads }, h('h2', {}, 'Outcome rates'),
      h('p', { class: 'note' }, prev ? `Claims answered per second over the last ${((at - prev.at) / 1000).toFixed(1)} s (total since claimd started in brackets), read from /metrics every ${interval / 1000} s.`
        : `Totals since claimd started; rates per second appear at the next read of /metrics, in ${interval / 1000} s.`),
      list.length ? table([
        ['namespace', (r) => r.ns],
        ['provider', (r) => r.p],
        ...outcomes.map((o) => [short(o), (r) => r.total[o] === undefined ? '' : (prev ? (r.rate[o] || 0).toFixed(2) + '/s ' : '') + '(' + r.total[o] + ')']),
      ], list, { class: 'rates' }) : h('p', { class: 'note' }, 'No claim answered yet.'),
      g.claimd_deferred_events === undefined ? '' : h('p', { class: 'note' },
        `Deferred events not applied: ${g.claimd_deferred_events}, past half their horizon: ${g.claimd_deferred_overdue_events ?? '?'}, lost: ${g.claimd_deferred_lost_events ?? '?'} (every namespace, sampled).`));
  }
}
