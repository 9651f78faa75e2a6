// app.js: the on-call page's shell. It reads what to show from the URL
// (?namespace=N&provider=P&key=K opens one key), asks for a bearer token
// when claimd refuses the page's first call for want of one, and renders
// one view at a time into <main>.

import { claims, token, setToken, forgetToken, APIError } from './api.js';
import { h } from './dom.js';
import { keyView, entityView, deferredView, overdueView } from './views.js';
import { Rates, interval } from './rates.js';

const $ = (id) => document.getElementById(id);
let generation = 0; // bumped by every render: a slower earlier one drops its result
let timer = null;

function params() { return new URLSearchParams(location.search); }

function status(text, cls) {
  const el = $('status');
  el.textContent = text;
  el.className = cls || '';
}

function showLogin(err) {
  $('login').hidden = false;
  $('search').hidden = true;
  $('view').replaceChildren();
  const e = $('login-error');
  e.hidden = !err;
  e.textContent = err ? `claimd refused the ${token() ? 'token' : 'call without a token'}: ${err.reason || 'HTTP ' + err.status}${err.message ? ' (' + err.message + ')' : ''}` : '';
  forgetToken(); // a refused token is kept nowhere
  who(false);
  generation++; // and nothing still loading or polling shows up under the form
  clearTimeout(timer);
  document.body.dataset.state = 'login';
  $('token').focus();
}

function who(authed) {
  $('who-text').textContent = token() ? 'token of this tab' : authed ? 'no token needed' : 'not connected';
  $('signout').hidden = !token();
}

// connect makes the page's first call (the provider list, read role): it
// tells whether credentials are needed and fills the provider choice.
async function connect() {
  try {
    const { body } = await claims.providers();
    const sel = $('provider');
    const want = params().get('provider') || sel.value;
    sel.replaceChildren(...(body.providers || []).map((p) => h('option', { value: p.name }, p.name + ((p.members || []).length ? ' (group)' : ''))));
    if (want) sel.value = want;
    $('login').hidden = true;
    $('search').hidden = false;
    who(true);
    return true;
  } catch (err) {
    if (err instanceof APIError && err.auth) {
      showLogin(token() ? err : null);
      return false;
    }
    status(`claimd did not answer the provider list: ${err.message}`, 'error');
    return false;
  }
}

// render shows the view the URL names.
async function render() {
  const gen = ++generation;
  clearTimeout(timer);
  const q = params();
  const view = q.get('view') || (q.get('key') ? 'key' : q.get('entity') ? 'entity' : 'search');
  const ns = q.get('namespace') || $('namespace').value;
  const p = q.get('provider') || $('provider').value;
  if (q.get('namespace')) $('namespace').value = ns;
  if (q.get('provider')) $('provider').value = p;
  if (q.get('key')) { $('kind').value = 'key'; $('q').value = q.get('key'); }
  if (q.get('entity')) { $('kind').value = 'entity'; $('q').value = q.get('entity'); }
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.view === view || (a.dataset.view === 'search' && (view === 'key' || view === 'entity')));

  const needs = view !== 'search' && view !== 'rates';
  if (needs && (!ns || !p)) {
    status('Choose a namespace and a provider.', 'warn');
    $('view').replaceChildren();
    return;
  }
  let node;
  const refresh = view === 'rates' && document.getElementById('rates-view');
  document.body.dataset.state = 'loading';
  if (!refresh) status('Loading…');
  try {
    switch (view) {
      case 'key': node = await keyView(ns, p, q.get('key')); break;
      case 'entity': node = await entityView(ns, p, q.get('lifecycle') || '', q.get('entity'), ''); break;
      case 'deferred': node = await deferredView(ns, p); break;
      case 'overdue': node = await overdueView(ns, p); break;
      case 'rates': node = await rates.render(ns); break;
      default:
        node = h('article', { id: 'search-help' }, h('h2', {}, 'Find a delivery'),
          h('p', {}, 'Give the namespace and provider, then a key (the provider\'s event id, as claimd was given it; a scoped key is the event id, the unit separator U+001F and the scope: open it by its link, key=evt_…%1Fscope) or an entity id (pi_…, ch_…).'),
          h('p', {}, 'Deferred lists the events that came before their prerequisite; Overdue the keys whose holder\'s lease ended before it settled; Rates the outcomes claimd answers per second.'));
    }
  } catch (err) {
    if (gen !== generation) return;
    if (err instanceof APIError && err.auth) { showLogin(err); return; }
    status(`${err.status ? 'HTTP ' + err.status + ' ' : ''}${err.reason ? err.reason + ': ' : ''}${err.message}`, 'error');
    $('view').replaceChildren();
    document.body.dataset.state = 'error';
    return;
  }
  if (gen !== generation) return;
  $('view').replaceChildren(node);
  status('');
  document.body.dataset.state = 'ready';
  if (view === 'rates') timer = setTimeout(() => { if (gen === generation) render(); }, interval);
}

const rates = new Rates();

function go(search) {
  history.pushState(null, '', '?' + search.toString());
  render();
}

function init() {
  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    setToken($('token').value.trim());
    $('token').value = '';
    if (await connect()) render();
  });
  $('signout').addEventListener('click', () => showLogin(null));
  $('search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const s = new URLSearchParams({ namespace: $('namespace').value.trim(), provider: $('provider').value });
    const v = $('q').value.trim();
    if (v) s.set($('kind').value === 'entity' ? 'entity' : 'key', v);
    go(s);
  });
  // Links within the page keep the namespace and provider chosen.
  document.addEventListener('click', (ev) => {
    const a = ev.target.closest && ev.target.closest('a.nav, #tabs a');
    if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
    ev.preventDefault();
    const s = new URL(a.href).searchParams;
    for (const k of ['namespace', 'provider']) if (!s.get(k) && $(k).value) s.set(k, $(k).value);
    go(s);
  });
  window.addEventListener('popstate', render);
  connect().then((ok) => { if (ok) render(); });
}

init();
