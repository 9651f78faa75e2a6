// views.js: the views of one key, one entity, and the deferred and overdue
// lists. Each returns a node built from API answers; an API error other
// than a missing record is thrown to app.js, which shows it (and the token
// form, when the credentials were refused).

import { claims, pages, APIError } from './api.js';
import { h, badge, short, when, ago, bytes, link, table, dl } from './dom.js';
import { lifecycleGraph } from './graph.js';

// The most pages of 1000 a list view reads; it says when more remain.
const maxPages = 5;

function note(text, cls) { return h('p', { class: 'note' + (cls ? ' ' + cls : '') }, text); }

// unavailable turns a failed optional read into a note; credentials
// refused are rethrown (the whole page needs them).
function unavailable(what, err) {
  if (err instanceof APIError && err.auth) throw err;
  return note(`Could not read ${what}: ${err.status ? 'HTTP ' + err.status + ' ' : ''}${err.reason ? err.reason + ': ' : ''}${err.message}`, 'warn');
}

function keyLink(ns, p, key) { return link({ namespace: ns, provider: p, key }, key); }
function entityLink(ns, p, lifecycle, entity) { return link({ namespace: ns, provider: p, lifecycle, entity }, entity); }

// keyView is one key's story: its record, what its next delivery would be
// answered, its audit trail, and its entity's lifecycle when it has one.
export async function keyView(ns, p, key) {
  const [rec, audit] = await Promise.allSettled([
    claims.record(ns, p, key),
    pages((t) => claims.audit(ns, p, key, t), 'entries', maxPages),
  ]);
  const out = h('article', { id: 'key-view' }, h('h2', {}, 'Key ', h('code', { id: 'key-name' }, key), h('span', { class: 'where' }, ` in ${ns} · ${p}`)));
  let record = null, next = null, now = new Date();
  if (rec.status === 'fulfilled') {
    ({ record, next } = rec.value.body);
    now = rec.value.date;
  } else if (!(rec.reason instanceof APIError) || rec.reason.status !== 404 || rec.reason.reason === 'PROVIDER_NOT_FOUND') {
    throw rec.reason;
  }

  // A deferred event writes no record: look for the key in the deferred list.
  let deferred = null;
  if (!record) {
    out.append(note('No record: this key was never acquired, its window ended and it was pruned, or its deliveries were all deferred (a deferral writes no record).', 'warn'));
    try {
      const { items } = await pages((t) => claims.deferred(ns, p, '', t), 'events', maxPages);
      deferred = items.find((d) => d.key === key) || null;
    } catch (err) { out.append(unavailable('the deferred list', err)); }
    if (deferred) {
      out.append(h('section', { id: 'deferred-note', class: 'card deferred' },
        h('h3', {}, deferred.superseded ? 'Superseded' : 'Deferred', ' ×', String(deferred.count || 1)),
        dl([
          ['event type', deferred.eventType],
          ['entity', entityLink(ns, p, deferred.lifecycle, deferred.entityId)],
          ['entity state', deferred.entityState],
          ['awaiting', (deferred.awaiting || []).join(', ')],
          ['first seen', when(deferred.firstSeenAt)],
          ['last seen', when(deferred.lastSeenAt)],
          ['horizon ends', when(deferred.horizonEndsAt)],
          ['status', [deferred.applied && badge('APPLIED'), deferred.ready && badge('READY'), deferred.lost && badge('LOST'), !deferred.applied && !deferred.ready && !deferred.lost && badge('WAITING')]],
        ])));
    }
  }

  if (next) {
    out.append(h('section', { id: 'next', class: 'card' }, h('h3', {}, 'The next delivery would get'),
      h('p', { class: 'big' }, badge(next.outcome), next.reason ? badge(next.reason, 'reason') : ''),
      dl([
        ['until', next.until ? when(next.until) + ' (' + ago(next.until, now) + ')' : ''],
        ['why', next.explanation || ''],
      ])));
  }
  if (record) {
    const leaseEnded = record.leaseExpiresAt && new Date(record.leaseExpiresAt) <= now;
    const terminal = ['EVENT_STATE_SETTLED', 'EVENT_STATE_FAILED'].includes(record.state);
    out.append(h('section', { id: 'record', class: 'card' }, h('h3', {}, 'Record'),
      dl([
        ['state', badge(record.state)],
        ['fencing token', record.fencingToken || '0'],
        ['attempt', String(record.attempt || 0)],
        ['holder', record.holder || ''],
        ['released', record.released ? 'yes: the next claim acquires it' : ''],
        ['first seen', when(record.firstSeenAt)],
        ['lease ends', record.leaseExpiresAt && !terminal ? [when(record.leaseExpiresAt), ' ', leaseEnded ? h('span', { class: 'badge b-overdue' }, 'ENDED ' + ago(record.leaseExpiresAt, now)) : '(' + ago(record.leaseExpiresAt, now) + ')'] : ''],
        ['window ends', when(record.windowExpiresAt)],
        ['updated', when(record.updatedAt)],
        ['payload sha256', bytes(record.payloadSha256, true)],
        ['result', bytes(record.result)],
        ['entity', record.entityId ? [record.lifecycle, ' ', entityLink(ns, p, record.lifecycle, record.entityId), ' · ', record.eventType] : ''],
      ])));
  }

  const trail = h('section', { id: 'audit', class: 'card wide' }, h('h3', {}, 'Audit trail'));
  if (audit.status === 'fulfilled') {
    const rows = audit.value.items.map((e) => Object.assign({ _class: e.reason === 'REASON_LEASE_EXPIRED' ? 'takeover' : '' }, e));
    trail.append(rows.length === 0 ? note('No audit rows for this key.') : table([
      ['at', (e) => when(e.at)],
      ['op', (e) => short(e.op)],
      ['outcome', (e) => [badge(e.outcome), e.reason ? badge(e.reason, 'reason') : '', e.reason === 'REASON_LEASE_EXPIRED' ? h('span', { class: 'badge b-takeover' }, 'TAKEOVER') : '']],
      ['state', (e) => badge(e.state)],
      ['token', (e) => e.fencingToken || ''],
      ['holder', (e) => e.holder || ''],
      ['principal', (e) => e.principal || '(anonymous)'],
      ['transport', (e) => e.transport || ''],
      ['', (e) => e.effectRecovered ? h('span', { class: 'badge b-recovered' }, 'EFFECT RECOVERED') : ''],
    ], rows));
    if (audit.value.more) trail.append(note(`Only the first ${rows.length} rows are shown.`));
  } else {
    trail.append(unavailable('the audit trail', audit.reason));
  }
  out.append(trail);

  const lifecycle = (record && record.lifecycle) || (deferred && deferred.lifecycle);
  const entity = (record && record.entityId) || (deferred && deferred.entityId);
  if (lifecycle && entity) out.append(await entityView(ns, p, lifecycle, entity, key));
  return out;
}

// entityView draws an entity in its lifecycle (or in each of the
// provider's lifecycles that knows it, when lifecycle is empty), with the
// events applied to it and those deferred for it, and lists its keys.
export async function entityView(ns, p, lifecycle, entityId, focusKey) {
  const prov = (await claims.provider(p)).body.provider;
  const all = prov.lifecycles || [];
  const chosen = lifecycle ? all.filter((l) => l.name === lifecycle) : all;
  const out = h('section', { id: 'entity', class: 'card wide' }, h('h3', {}, 'Entity ', h('code', {}, entityId), h('span', { class: 'where' }, ` in ${ns} · ${p}`)));
  if (chosen.length === 0) {
    out.append(note(lifecycle ? `Provider ${p} declares no lifecycle ${lifecycle}.` : `Provider ${p} declares no lifecycles: its events are not ordered by entity.`, 'warn'));
    return out;
  }
  let deferredAll = [];
  try {
    deferredAll = (await pages((t) => claims.deferred(ns, p, entityId, t), 'events', maxPages)).items;
  } catch (err) { out.append(unavailable('the deferred events', err)); }
  let found = 0;
  for (const lc of chosen) {
    let ent = null;
    try {
      ent = (await claims.entity(ns, p, lc.name, entityId)).body.entity;
    } catch (err) {
      if (!(err instanceof APIError) || err.status !== 404) throw err;
    }
    const deferred = deferredAll.filter((d) => d.lifecycle === lc.name);
    if (!ent && deferred.length === 0 && !lifecycle) continue;
    found++;
    const state = ent ? ent.state : (lc.states || [])[0];
    const applied = ent ? ent.applied || [] : [];
    out.append(h('div', { class: 'lifecycle', 'data-lifecycle': lc.name },
      h('h4', {}, 'Lifecycle ', lc.name),
      dl([
        ['state', h('span', { class: 'badge b-entity', id: 'entity-state' }, state)],
        ['version', ent ? String(ent.version || 0) : '0 (no event applied yet)'],
        ['updated', ent ? when(ent.updatedAt) : ''],
        ['busy with', ent && ent.busyWith ? link({ namespace: ns, provider: p, key: ent.busyWith }, ent.busyWith) : ''],
      ]),
      h('div', { class: 'graph-box' }, lifecycleGraph(lc, state, applied, deferred)),
      h('p', { class: 'legend' }, h('span', { class: 'sw applied' }), 'applied, in order ', h('span', { class: 'sw deferred' }), 'deferred (waits for the state it starts from) ',
        h('span', { class: 'sw lost' }), 'lost (past the retry horizon) ', h('span', { class: 'sw current' }), 'current state'),
      h('h4', {}, 'Applied events'),
      applied.length ? table([
        ['#', (a) => String(a._n)],
        ['event type', (a) => a.eventType],
        ['key', (a) => a.key === focusKey ? h('strong', {}, a.key) : keyLink(ns, p, a.key)],
        ['transition', (a) => `${a.fromState} → ${a.toState}`],
        ['token', (a) => a.fencingToken || ''],
        ['applied at', (a) => when(a.appliedAt)],
      ], applied.map((a, i) => Object.assign({ _n: i + 1 }, a)), { class: 'applied-events' }) : note('No event applied yet.'),
      deferred.length ? [h('h4', {}, 'Deferred and superseded events'), deferredTable(ns, p, deferred, focusKey)] : ''));
  }
  if (found === 0) out.append(note(`No entity ${entityId} in ${ns} · ${p}: no event of it was applied or deferred.`, 'warn'));
  try {
    const { items } = await pages((t) => claims.list(ns, { provider: p, entityId }, t), 'records', 1);
    if (items.length) {
      out.append(h('h4', {}, 'Its keys'), table([
        ['key', (r) => r.key === focusKey ? h('strong', {}, r.key) : keyLink(ns, p, r.key)],
        ['event type', (r) => r.eventType || ''],
        ['state', (r) => badge(r.state)],
        ['first seen', (r) => when(r.firstSeenAt)],
      ], items, { class: 'entity-keys' }));
    }
  } catch (err) { out.append(unavailable("the entity's keys", err)); }
  return out;
}

function deferredTable(ns, p, events, focusKey) {
  return table([
    ['key', (d) => d.key === focusKey ? h('strong', {}, d.key) : keyLink(ns, p, d.key)],
    ['event type', (d) => d.eventType],
    ['entity', (d) => entityLink(ns, p, d.lifecycle, d.entityId)],
    ['entity state', (d) => d.entityState],
    ['awaiting', (d) => (d.awaiting || []).join(', ')],
    ['count', (d) => String(d.count || 1)],
    ['first seen', (d) => when(d.firstSeenAt)],
    ['last seen', (d) => when(d.lastSeenAt)],
    ['horizon ends', (d) => when(d.horizonEndsAt)],
    ['', (d) => [d.superseded && badge('SUPERSEDED'), d.applied && badge('APPLIED'), d.ready && badge('READY'), d.lost && badge('LOST')]],
  ], events.map((d) => Object.assign({ _class: d.lost ? 'lost' : d.ready ? 'ready' : '' }, d)), { class: 'deferred-events' });
}

// deferredView lists the namespace's deferred and superseded events of a provider.
export async function deferredView(ns, p) {
  const { items, more } = await pages((t) => claims.deferred(ns, p, '', t), 'events', maxPages);
  const waiting = items.filter((d) => !d.applied && !d.superseded);
  return h('article', { id: 'deferred-view' }, h('h2', {}, 'Deferred events', h('span', { class: 'where' }, ` in ${ns} · ${p}`)),
    note(`${waiting.length} waiting (${waiting.filter((d) => d.ready).length} ready, ${waiting.filter((d) => d.lost).length} lost), ${items.length} listed. ` +
      'A ready event is applied by the provider\'s next retry; a lost one will not be retried: ask the provider to resend it.'),
    items.length ? deferredTable(ns, p, items, '') : note('Nothing was deferred.'),
    more ? note(`Only the newest ${items.length} are shown.`) : '');
}

// overdueView lists the records still RECEIVED, VALIDATED or PROCESSING
// whose holder's lease has ended (by claimd's clock): their holder died
// or hangs, and the provider's next retry will take them over.
export async function overdueView(ns, p) {
  const states = ['EVENT_STATE_RECEIVED', 'EVENT_STATE_VALIDATED', 'EVENT_STATE_PROCESSING'];
  const { items, more, date } = await pages((t) => claims.list(ns, { provider: p, states }, t), 'records', maxPages);
  const now = date || new Date();
  const overdue = items.filter((r) => !r.released && r.leaseExpiresAt && new Date(r.leaseExpiresAt) <= now)
    .sort((a, b) => new Date(a.leaseExpiresAt) - new Date(b.leaseExpiresAt));
  return h('article', { id: 'overdue-view' }, h('h2', {}, 'Overdue', h('span', { class: 'where' }, ` in ${ns} · ${p}`)),
    note(`${overdue.length} of ${items.length} records in progress have a lease that ended (claimd's clock: ${when(now.toISOString())}). ` +
      'Their holder vanished or hangs; the next delivery takes the key over (LEASE_EXPIRED).'),
    overdue.length ? table([
      ['key', (r) => keyLink(ns, p, r.key)],
      ['state', (r) => badge(r.state)],
      ['holder', (r) => r.holder || ''],
      ['lease ended', (r) => [when(r.leaseExpiresAt), ' (', ago(r.leaseExpiresAt, now), ')']],
      ['token', (r) => r.fencingToken || ''],
      ['attempt', (r) => String(r.attempt || 0)],
      ['first seen', (r) => when(r.firstSeenAt)],
    ], overdue, { class: 'overdue-records' }) : note('Nothing is overdue.'),
    more ? note(`Only the newest ${items.length} records in progress were read.`) : '');
}
